package runner

import (
	"os"
	"path/filepath"
	"testing"
)

// Ensure a target folder inside the checkout is recorded relative to it
// whether the runner's root is relative (the runner's default ".") or
// absolute, and a folder outside it, or the checkout itself, as "".
func TestCheckoutDir(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		root, dir, want string
	}{
		{".", filepath.Join(wd, "targets", "express-idempotency"), "targets/express-idempotency"},
		{wd, filepath.Join(wd, "targets", "x"), "targets/x"},
		{".", "targets/x", "targets/x"},
		{"..", filepath.Join(wd, "x"), filepath.Base(wd) + "/x"},
		{".", filepath.Dir(wd), ""},
		{".", "/", ""},
		{".", wd, ""},
	}
	for _, tt := range tests {
		if got := checkoutDir(tt.root, tt.dir); got != tt.want {
			t.Errorf("checkoutDir(%q, %q) = %q, want %q", tt.root, tt.dir, got, tt.want)
		}
	}
}

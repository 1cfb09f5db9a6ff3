package folderlock

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure shared locks coexist, an exclusive lock excludes every other
// lock either way round, closing the folder releases the lock, and a
// missing folder is an error naming it.
func TestLock(t *testing.T) {
	tests := []struct {
		name        string
		held, asked Mode
		wantHeld    bool
	}{
		{"shared beside shared", Shared, Shared, false},
		{"exclusive beside shared", Shared, Exclusive, true},
		{"shared beside exclusive", Exclusive, Shared, true},
		{"exclusive beside exclusive", Exclusive, Exclusive, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			first, err := Lock(dir, tt.held)
			if err != nil {
				t.Fatal(err)
			}
			second, err := Lock(dir, tt.asked)
			if got := errors.Is(err, ErrHeld); got != tt.wantHeld {
				t.Fatalf("second Lock error = %v, want held %v", err, tt.wantHeld)
			}
			if second != nil {
				second.Close()
			}
			first.Close()
			third, err := Lock(dir, tt.asked)
			if err != nil {
				t.Fatalf("Lock after the first was closed: %v", err)
			}
			third.Close()
		})
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := Lock(missing, Shared); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Lock(missing folder) error = %v, want one naming %s", err, missing)
	}
}

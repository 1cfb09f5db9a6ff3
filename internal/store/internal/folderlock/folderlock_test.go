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

// Ensure Hold refuses a folder locked against it, saying who holds it,
// and releases its lock when the store's open fails.
func TestHold(t *testing.T) {
	dir := t.TempDir()
	failed := errors.New("open failed")
	if _, _, err := Hold(dir, Exclusive, "", func() (int, error) { return 0, failed }); !errors.Is(err, failed) {
		t.Fatalf("Hold with a failing open = %v, want %v", err, failed)
	}
	v, lock, err := Hold(dir, Exclusive, "", func() (int, error) { return 7, nil })
	if err != nil || v != 7 {
		t.Fatalf("Hold after a failed open = %d, %v; want 7 (the lock released)", v, err)
	}
	defer lock.Close()
	if _, _, err := Hold(dir, Shared, "someone holds it", func() (int, error) { return 0, nil }); err == nil || !strings.Contains(err.Error(), dir+": someone holds it") {
		t.Fatalf("Hold on a held folder = %v, want one naming %s and who holds it", err, dir)
	}
}

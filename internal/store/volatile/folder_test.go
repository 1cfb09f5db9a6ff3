package volatile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/store/durable"
)

// Ensure a second Open of a folder in use is refused, naming the folder,
// until the first one is closed: two volatile servers on one folder would
// each count from their own copy of the counter and lose acknowledged
// effects.
func TestOpenLocksFolder(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	err := openErr(dir)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another server") {
		t.Fatalf("second Open error = %v, want one naming %s and another server", err, dir)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Increment(fp); !errors.Is(err, ErrClosed) {
		t.Fatalf("Increment after Close: %v, want ErrClosed", err)
	}
	open(t, dir) // after Close
}

// Ensure a folder holding a durable store's database is refused, naming
// the file, whatever the file holds: the volatile store would start from
// zero beside it.
func TestOpenRefusesDurableFiles(t *testing.T) {
	for _, name := range []string{durable.FileName, durable.FileName + "-wal"} {
		dir := t.TempDir()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := openErr(dir); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "durable") {
			t.Errorf("Open with %s error = %v, want one naming %s and the durable store", name, err, path)
		}
	}
}

// Ensure the durable store's file names this package refuses are the ones
// that store uses.
func TestDurableNames(t *testing.T) {
	if got, want := durableFile, durable.FileName; got != want {
		t.Fatalf("durableFile = %q, want %q", got, want)
	}
}

package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Ensure Read reads a regular file within its cap and refuses, naming the
// path, everything else: a symlink (even to a regular file), a folder, a
// FIFO (without hanging), a device, a file over the cap, a missing file.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(at("ok"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(at("ok"), at("link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(at("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(at("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		max  int64
		want error
	}{
		{at("ok"), 5, nil},
		{at("ok"), 4, ErrTooLarge},
		{at("link"), 5, ErrNotRegular},
		{at("fifo"), 5, ErrNotRegular},
		{at("dir"), 5, ErrNotRegular},
		{"/dev/zero", 5, ErrNotRegular},
		{at("missing"), 5, os.ErrNotExist},
	}
	for _, tt := range tests {
		b, err := Read(tt.path, tt.max)
		if tt.want == nil {
			if err != nil || string(b) != "12345" {
				t.Errorf("Read(%s) = %q, %v", tt.path, b, err)
			}
			continue
		}
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.path) {
			t.Errorf("Read(%s, %d) error = %v, want %v naming the path", tt.path, tt.max, err, tt.want)
		}
	}
}

// Ensure Open opens a regular file whatever its size and refuses, at once
// and naming the path, a symlink, a FIFO and a device.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte(strings.Repeat("x", 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	f, err := Open(ok)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, path := range []string{fifo, link, "/dev/zero"} {
		if f, err := Open(path); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), path) {
			if f != nil {
				f.Close()
			}
			t.Errorf("Open(%s) error = %v, want ErrNotRegular naming the path", path, err)
		}
	}
}

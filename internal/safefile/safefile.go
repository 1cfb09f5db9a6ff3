// Package safefile reads the lab's input files (case files, schemas) the
// one careful way: only a regular file, never through a symlink, never a
// FIFO or a device, and never more than a stated size, so that a hostile or
// mistaken input is an error naming it instead of a hang or an exhausted
// memory.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular means the path is a symlink, folder, FIFO, device or socket.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge means the file holds more bytes than the caller allows.
var ErrTooLarge = errors.New("file too large")

// Read returns the bytes of the regular file at path, at most max of them.
// Errors name the path.
func Read(path string, max int64) ([]byte, error) {
	b, err := read(path, max)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

func read(path string, max int64) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if fi.Size() > max {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)
	}
	return b, nil
}

// Open opens the regular file at path for reading, refusing what Read
// refuses but for the size: for a reader that streams a file it bounds
// itself. Errors name the path.
func Open(path string) (*os.File, error) {
	f, err := open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func open(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))
	}
	// O_NOFOLLOW and O_NONBLOCK: if the file was swapped for a symlink or a
	// FIFO since the Lstat, the open fails or returns at once instead of
	// following it or hanging.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil {
		f.Close()
		return nil, err
	} else if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))
	}
	return f, nil
}

// kind names a file mode's type for a message.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

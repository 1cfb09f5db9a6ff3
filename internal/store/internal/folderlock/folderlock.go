// Package folderlock locks a store's state folder with flock(2) on the
// folder itself: no lock file is left behind and the kernel drops the lock
// however the process ends. Durable servers share a folder; a volatile
// server needs it to itself.
package folderlock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A Mode is the kind of lock.
type Mode int

// The modes: any number of Shared locks, or one Exclusive lock.
const (
	Shared Mode = iota
	Exclusive
)

// ErrHeld means another open file holds a conflicting lock on the folder.
var ErrHeld = errors.New("folder locked")

// Lock locks the folder dir in mode without waiting; closing the returned
// file releases it. A conflicting lock is ErrHeld.
func Lock(dir string, mode Mode) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	if err := flock(f, mode); err != nil {
		f.Close()
		if errors.Is(err, ErrHeld) {
			return nil, ErrHeld
		}
		return nil, fmt.Errorf("state folder %s: lock: %w", dir, err)
	}
	return f, nil
}

// Hold locks the state folder dir in mode (a conflicting lock is an error
// saying held) and calls open under the lock, which it returns with
// open's value; if open fails, the lock is released.
func Hold[T any](dir string, mode Mode, held string, open func() (T, error)) (T, *os.File, error) {
	var zero T
	fi, err := os.Stat(dir)
	if err != nil {
		return zero, nil, fmt.Errorf("state folder: %w", err)
	}
	if !fi.IsDir() {
		return zero, nil, fmt.Errorf("state folder %s: not a directory", dir)
	}
	lock, err := Lock(dir, mode)
	if errors.Is(err, ErrHeld) {
		return zero, nil, fmt.Errorf("state folder %s: %s", dir, held)
	}
	if err != nil {
		return zero, nil, err
	}
	v, err := open()
	if err != nil {
		lock.Close()
		return zero, nil, err
	}
	return v, lock, nil
}

// Present returns the path of the first of names that exists in dir (links
// not followed), or "".
func Present(dir string, names ...string) (string, error) {
	for _, name := range names {
		path := filepath.Join(dir, name)
		_, err := os.Lstat(path)
		if err == nil {
			return path, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("state folder %s: %w", dir, err)
		}
	}
	return "", nil
}

// Package folderlock locks a store's state folder: flock(2) on the folder
// itself, so there is no lock file to leave behind, and the kernel drops
// the lock when the process ends, however it ends. Durable servers share
// a folder (Shared); the volatile store needs its folder to itself
// (Exclusive), so neither store starts on a folder the other runs on, nor
// on the files the other left there (Present finds them).
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

// Lock opens the folder dir and locks it in mode without waiting, and
// returns the open folder that holds the lock: closing it releases the
// lock. A conflicting lock is ErrHeld, for the caller to say whose.
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

// Hold opens a store on the state folder dir: it checks that dir is a
// folder, locks it in mode (a conflicting lock is an error naming dir and
// saying who, as held puts it), and calls open with the folder locked. It
// returns what open returned and the open folder holding the lock; if open
// fails, the lock is released.
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

// Present returns the path of the first of names that exists in dir (as a
// file of any kind, a link not followed), or "" when none does.
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

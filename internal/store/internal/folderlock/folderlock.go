// Package folderlock locks a store's state folder: flock(2) on the folder
// itself, so there is no lock file to leave behind, and the kernel drops
// the lock when the process ends, however it ends. Durable servers share
// a folder (Shared); the volatile store needs its folder to itself
// (Exclusive), so neither store starts on a folder the other runs on.
package folderlock

import (
	"errors"
	"fmt"
	"os"
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

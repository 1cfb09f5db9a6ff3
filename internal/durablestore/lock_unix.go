//go:build unix

package durablestore

import (
	"errors"
	"os"
	"syscall"
)

// lockShared takes flock(LOCK_SH) on f without waiting; errHeld means
// another open file holds an exclusive lock on it.
func lockShared(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return errHeld
		case !errors.Is(err, syscall.EINTR):
			return err
		}
	}
}

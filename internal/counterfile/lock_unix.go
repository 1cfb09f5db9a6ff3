//go:build unix

package counterfile

import (
	"errors"
	"os"
	"syscall"
)

// lockExclusive takes flock(LOCK_EX) on f without waiting; errHeld means
// another open file holds a lock on it.
func lockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
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

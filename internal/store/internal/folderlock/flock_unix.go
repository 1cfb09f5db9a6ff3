//go:build unix

package folderlock

import (
	"errors"
	"os"
	"syscall"
)

// flock takes flock(2) in mode on f without waiting, retrying on EINTR.
func flock(f *os.File, mode Mode) error {
	how := syscall.LOCK_SH
	if mode == Exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrHeld
		case !errors.Is(err, syscall.EINTR):
			return err
		}
	}
}

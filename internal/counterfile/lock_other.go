//go:build !unix

package counterfile

import (
	"errors"
	"os"
)

// lockExclusive would take an exclusive lock on f; without flock(2) the
// store refuses to run rather than run unguarded.
func lockExclusive(f *os.File) error {
	return errors.New("locking a state folder is not supported on this system")
}

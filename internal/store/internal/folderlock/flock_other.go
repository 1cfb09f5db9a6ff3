//go:build !unix

package folderlock

import (
	"errors"
	"os"
)

// flock would lock f; without flock(2) a store refuses to run rather than
// run unguarded.
func flock(f *os.File, mode Mode) error {
	return errors.New("locking a state folder is not supported on this system")
}

//go:build !unix

package durablestore

import (
	"errors"
	"os"
)

// lockShared would take a shared lock on f; without flock(2) the store
// refuses to run rather than run unguarded.
func lockShared(f *os.File) error {
	return errors.New("locking a state folder is not supported on this system")
}

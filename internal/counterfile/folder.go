package counterfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// durableFile is the durable store's database (durablestore.FileName),
// named here because that package is not imported.
const durableFile = "state.db"

// errHeld is what lock answers when another open file holds a conflicting
// lock on the folder.
var errHeld = errors.New("folder locked")

// lockFolder takes an exclusive lock on the folder dir itself (flock(2) on
// the directory: no lock file to leave behind), without waiting, and
// returns the open folder that holds it. Closing it releases the lock; so
// does the kernel when the process ends, however it ends.
//
// The durable store takes a shared lock on its folder the same way, so a
// volatile server is refused on a folder a durable server runs on, and the
// other way round.
func lockFolder(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		if errors.Is(err, errHeld) {
			return nil, fmt.Errorf("state folder %s: another server holds it (a volatile server needs its folder to itself)", dir)
		}
		return nil, fmt.Errorf("state folder %s: lock: %w", dir, err)
	}
	return f, nil
}

// refuseDurable fails, naming the file, when dir holds the durable store's
// database or its write-ahead log: started on it, the volatile store would
// count from zero beside the effects recorded there.
func refuseDurable(dir string) error {
	for _, name := range []string{durableFile, durableFile + "-wal"} {
		path := filepath.Join(dir, name)
		_, err := os.Lstat(path)
		if err == nil {
			return fmt.Errorf("state folder %s: %s belongs to the durable store, not the volatile one", dir, path)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("state folder %s: %w", dir, err)
		}
	}
	return nil
}

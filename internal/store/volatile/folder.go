package volatile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"idemlab/internal/store/internal/folderlock"
)

// durableFile is the durable store's database (durable.FileName),
// named here because that package is not imported.
const durableFile = "state.db"

// lockFolder takes an exclusive lock on the folder dir itself (flock(2) on
// the directory: no lock file to leave behind), without waiting, and
// returns the open folder that holds it. Closing it releases the lock; so
// does the kernel when the process ends, however it ends.
//
// The durable store takes a shared lock on its folder the same way, so a
// volatile server is refused on a folder a durable server runs on, and the
// other way round.
func lockFolder(dir string) (*os.File, error) {
	f, err := folderlock.Lock(dir, folderlock.Exclusive)
	if errors.Is(err, folderlock.ErrHeld) {
		return nil, fmt.Errorf("state folder %s: another server holds it (a volatile server needs its folder to itself)", dir)
	}
	return f, err
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

package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"idemlab/internal/store/internal/folderlock"
)

// volatileFiles are the volatile store's counter and journal
// (volatile.FileName and volatile.JournalName), named here because
// that package is not imported.
var volatileFiles = []string{"counter", "effects.log"}

// lockFolder takes a shared lock on the folder dir itself (flock(2) on the
// directory: no lock file to leave behind), without waiting, and returns
// the open folder that holds it. Durable stores share a folder; the
// volatile store takes the lock exclusively, so neither store starts on a
// folder the other runs on. Closing the file releases the lock; so does the
// kernel when the process ends, however it ends.
func lockFolder(dir string) (*os.File, error) {
	f, err := folderlock.Lock(dir, folderlock.Shared)
	if errors.Is(err, folderlock.ErrHeld) {
		return nil, fmt.Errorf("state folder %s: a volatile server holds it", dir)
	}
	return f, err
}

// refuseForeign fails, naming the file, when dir holds the volatile
// store's files, or the database's write-ahead log without the database
// (SQLite would replay that log into a new database).
func refuseForeign(dir string) error {
	exists := func(path string) (bool, error) {
		_, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("state folder %s: %w", dir, err)
		}
		return true, nil
	}
	for _, name := range volatileFiles {
		path := filepath.Join(dir, name)
		if ok, err := exists(path); err != nil || ok {
			if err != nil {
				return err
			}
			return fmt.Errorf("state folder %s: %s belongs to the volatile store, not the durable one", dir, path)
		}
	}
	db, err := exists(filepath.Join(dir, FileName))
	if err != nil || db {
		return err
	}
	wal := filepath.Join(dir, FileName+"-wal")
	if ok, err := exists(wal); err != nil || ok {
		if err != nil {
			return err
		}
		return fmt.Errorf("state folder %s: %s without %s: the database was removed but not its log", dir, wal, FileName)
	}
	return nil
}

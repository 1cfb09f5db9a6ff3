package durable

import (
	"fmt"

	"idemlab/internal/store/internal/folderlock"
)

// volatileFiles are the volatile store's counter and journal
// (volatile.FileName and volatile.JournalName), named here because
// that package is not imported.
var volatileFiles = []string{"counter", "effects.log"}

// refuseForeign fails, naming the file, when dir holds the volatile
// store's files, or the database's write-ahead log without the database
// (SQLite would replay that log into a new database).
func refuseForeign(dir string) error {
	path, err := folderlock.Present(dir, volatileFiles...)
	if err != nil {
		return err
	}
	if path != "" {
		return fmt.Errorf("state folder %s: %s belongs to the volatile store, not the durable one", dir, path)
	}
	if db, err := folderlock.Present(dir, FileName); err != nil || db != "" {
		return err
	}
	wal, err := folderlock.Present(dir, FileName+"-wal")
	if err != nil || wal == "" {
		return err
	}
	return fmt.Errorf("state folder %s: %s without %s: the database was removed but not its log", dir, wal, FileName)
}

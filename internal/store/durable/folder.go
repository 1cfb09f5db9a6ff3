package durable

import (
	"fmt"

	"idemlab/internal/store/internal/folderlock"
)

// volatileFiles are volatile.FileName and JournalName (not imported).
var volatileFiles = []string{"counter", "effects.log"}

// refuseForeign fails when dir holds the volatile store's files, or the
// database's WAL without the database (SQLite would replay it into a new
// one).
func refuseForeign(dir string) error {
	path, err := folderlock.Present(dir, volatileFiles...)
	if err != nil {
		return err
	}
	if path != "" {
		return fmt.Errorf("state folder %s: %s belongs to the volatile store, not the durable one", dir, path)
	}
	// The log first: processes open a new folder at once (a shared lock),
	// and another may name the database and open its log between the two
	// looks; the database is never removed, so its absence after the log
	// was seen means it was absent then too.
	wal, err := folderlock.Present(dir, FileName+"-wal")
	if err != nil || wal == "" {
		return err
	}
	if db, err := folderlock.Present(dir, FileName); err != nil || db != "" {
		return err
	}
	return fmt.Errorf("state folder %s: %s without %s: the database was removed but not its log", dir, wal, FileName)
}

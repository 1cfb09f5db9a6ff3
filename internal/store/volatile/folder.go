package volatile

import (
	"fmt"

	"idemlab/internal/store/internal/folderlock"
)

// durableFile is durable.FileName (that package is not imported).
const durableFile = "state.db"

// refuseDurable fails when dir holds the durable store's database: the
// volatile store would count from zero beside its effects.
func refuseDurable(dir string) error {
	path, err := folderlock.Present(dir, durableFile, durableFile+"-wal")
	if err != nil || path == "" {
		return err
	}
	return fmt.Errorf("state folder %s: %s belongs to the durable store, not the volatile one", dir, path)
}

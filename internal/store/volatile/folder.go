package volatile

import (
	"fmt"

	"idemlab/internal/store/internal/folderlock"
)

// durableFile is the durable store's database (durable.FileName),
// named here because that package is not imported.
const durableFile = "state.db"

// refuseDurable fails, naming the file, when dir holds the durable store's
// database or its write-ahead log: started on it, the volatile store would
// count from zero beside the effects recorded there.
func refuseDurable(dir string) error {
	path, err := folderlock.Present(dir, durableFile, durableFile+"-wal")
	if err != nil || path == "" {
		return err
	}
	return fmt.Errorf("state folder %s: %s belongs to the durable store, not the volatile one", dir, path)
}

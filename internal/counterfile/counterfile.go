// Package counterfile keeps the lab's side effect: a counter in a file that
// is made durable on every increment and that a reader never sees torn.
//
// The file DIR/counter holds the decimal value and "\n"; a missing file
// means 0. An increment writes a temporary file in DIR, fsyncs it, renames
// it over counter and fsyncs DIR, so the file always holds either the old or
// the new value, before and after a crash.
package counterfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// FileName is the counter file's name inside the state folder.
const FileName = "counter"

// tempPrefix starts the name of a temporary file being written; leftovers
// of a crash are removed by Open.
const tempPrefix = ".counter-"

// A Counter is the counter file of one state folder. Its methods are safe
// for concurrent use; increments are serialized.
type Counter struct {
	dir  string
	mu   sync.Mutex
	val  int64
	path string
}

// Open loads the counter of dir, which must be a writable folder. It removes
// temporary files a crash may have left, and fails on a malformed counter
// file, naming it.
func Open(dir string) (*Counter, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("state folder: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("state folder %s: not a directory", dir)
	}
	leftovers, err := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	for _, name := range leftovers {
		if err := os.Remove(name); err != nil {
			return nil, fmt.Errorf("remove leftover %s: %w", name, err)
		}
	}
	v, err := Read(dir)
	if err != nil {
		return nil, err
	}
	// Prove the folder is writable now, not at the first request.
	probe, err := os.CreateTemp(dir, tempPrefix+"probe-*")
	if err != nil {
		return nil, fmt.Errorf("state folder %s: not writable: %w", dir, err)
	}
	probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	return &Counter{dir: dir, val: v, path: filepath.Join(dir, FileName)}, nil
}

// Read returns the value stored in dir's counter file, 0 when there is none.
// The runner uses it to read the counter after the server has exited.
func Read(dir string) (int64, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read counter %s: %w", path, err)
	}
	v, err := parse(b)
	if err != nil {
		return 0, fmt.Errorf("counter file %s: %w", path, err)
	}
	return v, nil
}

// parse reads "N\n" with N a decimal without sign or leading zeros.
func parse(b []byte) (int64, error) {
	digits, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok || len(digits) == 0 || len(digits) > 1 && digits[0] == '0' || bytes.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, fmt.Errorf("malformed content %s (want a decimal and a newline)", quote(b))
	}
	v, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed content %s: %w", quote(b), err)
	}
	return v, nil
}

// quote shows at most 32 bytes of bad content.
func quote(b []byte) string {
	if len(b) > 32 {
		return strconv.Quote(string(b[:32])) + "..."
	}
	return strconv.Quote(string(b))
}

// Value returns the current value.
func (c *Counter) Value() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.val
}

// Path returns the counter file's path.
func (c *Counter) Path() string { return c.path }

// Increment adds one and returns the new value once it is durable. On error
// the effect did not happen as far as this Counter knows: its value is
// unchanged, unless the rename already replaced the file, in which case the
// value follows the file and the error says the folder sync failed.
func (c *Counter) Increment() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.val + 1
	renamed, err := c.write(next)
	if renamed {
		c.val = next
	}
	if err != nil {
		return 0, err
	}
	return next, nil
}

// write replaces the counter file with v; renamed reports whether the new
// file took the counter's name.
func (c *Counter) write(v int64) (renamed bool, err error) {
	tmp, err := os.CreateTemp(c.dir, tempPrefix+"*")
	if err != nil {
		return false, fmt.Errorf("write counter %s: %w", c.path, err)
	}
	defer func() {
		if !renamed {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.WriteString(strconv.FormatInt(v, 10) + "\n"); err != nil {
		tmp.Close()
		return false, fmt.Errorf("write counter %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, fmt.Errorf("sync counter %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("close counter %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return false, fmt.Errorf("rename counter %s: %w", c.path, err)
	}
	if err := syncDir(c.dir); err != nil {
		return true, err
	}
	return true, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync state folder %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state folder %s: %w", dir, err)
	}
	return nil
}

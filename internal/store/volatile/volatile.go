// Package volatile is the volatile store: a durable counter file
// (DIR/counter, replaced by fsynced temp file and rename) and a journal
// (DIR/effects.log, one "<value> <sha256hex>" line per effect), with no
// keys of its own.
//
// The journal line is fsynced before the counter is replaced, so the
// journal is never behind: a crash leaves at most one extra record, whole
// or torn, which Open cuts and reports and ReadState ignores. Anything
// else after the counter's effects is refused, never cut. One process at
// a time holds the folder.
package volatile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"idemlab/internal/safefile"
	"idemlab/internal/store"
	"idemlab/internal/store/internal/folderlock"
)

// FileName is the counter file's name inside the state folder.
const FileName = "counter"

// tempPrefix starts a temporary file's name; Open removes crash leftovers.
const tempPrefix = ".counter-"

// A Counter is the counter file of one state folder; increments are
// serialized.
type Counter struct {
	dir     string
	path    string
	journal string // the journal's path

	mu       sync.Mutex
	lock     *os.File // the folder, locked; nil once closed
	val      int64
	jsize    int64 // bytes of the journal that hold the effects up to val
	jcreated bool  // the journal file exists and its folder entry is durable

	repairs []string // what Open cut off (see Repairs)
}

var (
	_ store.Store    = (*Counter)(nil)
	_ store.Repairer = (*Counter)(nil)
)

// Open loads the counter of dir and holds the folder until Close. It
// repairs what a crash left and fails, naming the file, on a malformed
// counter or journal or on the durable store's database.
func Open(dir string) (*Counter, error) {
	c, lock, err := folderlock.Hold(dir, folderlock.Exclusive, "another server holds it (a volatile server needs its folder to itself)", func() (*Counter, error) {
		return load(dir)
	})
	if err != nil {
		return nil, err
	}
	c.lock = lock
	return c, nil
}

// load is Open once the folder is locked.
func load(dir string) (*Counter, error) {
	if err := refuseDurable(dir); err != nil {
		return nil, err
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
	journal := filepath.Join(dir, JournalName)
	j, err := readJournal(journal, v)
	if err != nil {
		return nil, err
	}
	var repairs []string
	if j.exists && j.tail > 0 {
		if err := truncate(journal, j.size); err != nil {
			return nil, err
		}
		if j.torn != nil {
			repairs = append(repairs, fmt.Sprintf("effects log %s: cut a torn record of %d bytes after line %d (a crash while journaling effect %d): %s",
				journal, j.tail, v, v+1, quote(j.torn)))
		} else {
			repairs = append(repairs, fmt.Sprintf("effects log %s: cut the record of effect %d after line %d (%d bytes): journaled, but a crash came before the counter said so",
				journal, v+1, v, j.tail))
		}
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
	return &Counter{
		dir:      dir,
		path:     filepath.Join(dir, FileName),
		journal:  journal,
		val:      v,
		jsize:    j.size,
		jcreated: j.exists,
		repairs:  repairs,
	}, nil
}

// MaxCounterBytes bounds what Read reads of a counter file: enough that a
// wrong file shows as malformed, few enough that none exhausts memory.
const MaxCounterBytes = 64

// Read returns the value in dir's counter file, 0 when there is none. A
// counter that is not a regular file is an error, never followed or
// waited on.
func Read(dir string) (int64, error) {
	path := filepath.Join(dir, FileName)
	b, err := safefile.Read(path, MaxCounterBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("counter file: %w", err)
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

// Repairs says what Open cut off the journal (store.Repairer).
func (c *Counter) Repairs() []string { return c.repairs }

// Increment adds one for a body of fingerprint fp and returns the new
// value once journal and counter are durable. On error the value is
// unchanged (the next journal line overwrites the failed one) unless the
// rename already replaced the file: then the value follows the file.
func (c *Counter) Increment(fp store.Fingerprint) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lock == nil {
		return 0, ErrClosed
	}
	next := c.val + 1
	line := strconv.FormatInt(next, 10) + " " + fp.Hex() + "\n"
	if err := c.appendJournal(line); err != nil {
		return 0, err
	}
	renamed, err := c.write(next)
	if renamed {
		c.val = next
		c.jsize += int64(len(line))
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
	return true, store.Sync(c.dir)
}

// Recorded returns nothing: the volatile store keeps no keys, which is the
// design under test.
func (c *Counter) Recorded() ([]store.Record, error) { return nil, nil }

// Apply increments the counter for in, then calls afterEffect. It records
// no key: the server's registry ticket is the record.
func (c *Counter) Apply(in store.Intent, afterEffect func() error) (store.Result, error) {
	v, err := c.Increment(in.Fingerprint)
	if err != nil {
		return store.Result{}, fmt.Errorf("apply effect: %w", err)
	}
	if err := afterEffect(); err != nil {
		return store.Result{}, err
	}
	return store.Result{Value: v}, nil
}

// ErrClosed is returned by Increment after Close.
var ErrClosed = errors.New("volatile store closed")

// Close releases the state folder; later calls do nothing.
func (c *Counter) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lock == nil {
		return nil
	}
	err := c.lock.Close()
	c.lock = nil
	if err != nil {
		return fmt.Errorf("state folder %s: release: %w", c.dir, err)
	}
	return nil
}

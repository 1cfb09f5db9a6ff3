// Package volatile keeps the lab's side effect for the volatile store: a
// counter in a file that is made durable on every increment and that a
// reader never sees torn, with a journal of the effects applied to it.
//
// The file DIR/counter holds the decimal value and "\n"; a missing file
// means 0. An increment writes a temporary file in DIR, fsyncs it, renames
// it over counter and fsyncs DIR, so the file always holds either the old or
// the new value, before and after a crash.
//
// The journal DIR/effects.log has one line "<value> <sha256hex>\n" per
// applied effect: the counter value it produced and the SHA-256 of the
// request body. Under the counter's mutex, an increment first writes and
// fsyncs the journal line, then replaces the counter file. So the journal
// is never behind the counter: a crash between the two leaves one line more
// than the counter says (an effect that was journaled but never applied),
// and a crash in the middle of the journal write leaves a torn last line
// (under MaxRecordLen bytes, without its newline). Open cuts either off and
// says so (Repairs); ReadState ignores them. Anything else after the
// counter's effects is refused by both, never cut: it is not what a crash
// leaves. Either way the journal lists exactly the effects the counter
// holds, in the order they were applied. A counter or journal that is not a
// regular file (a FIFO, a device, a symlink) is refused at once.
//
// One process at a time: Open locks the state folder exclusively until
// Close (package folderlock), and refuses a folder that holds the durable store's
// database. Other files in the folder are not the store's and are left
// alone.
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

// tempPrefix starts the name of a temporary file being written; leftovers
// of a crash are removed by Open.
const tempPrefix = ".counter-"

// A Counter is the counter file of one state folder. Its methods are safe
// for concurrent use; increments are serialized.
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

// Open loads the counter of dir, which must be a writable folder no other
// server is using, and holds the folder until Close. It removes temporary
// files a crash may have left, cuts off the journal lines a crash left
// beyond the counter, and fails on a malformed counter file or journal, or
// on the durable store's database, naming the file.
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

// MaxCounterBytes bounds what Read reads of a counter file: far more than
// the 20 bytes of the largest counter, so that a wrong file shows as
// malformed, and few enough that no file can exhaust memory.
const MaxCounterBytes = 64

// Read returns the value stored in dir's counter file, 0 when there is none.
// The runner uses it to read the counter after the server has exited. A
// counter that is not a regular file (a FIFO, a device, a symlink, a
// folder) is an error naming it, returned at once: it is never followed,
// waited on or read without end.
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

// Repairs says what Open cut off the journal, one line each: at most one
// record a crash left beyond the counter, whole or torn. It makes *Counter
// a store.Repairer: the server logs them at start.
func (c *Counter) Repairs() []string { return c.repairs }

// Value returns the current value.
func (c *Counter) Value() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.val
}

// Path returns the counter file's path.
func (c *Counter) Path() string { return c.path }

// Increment adds one for a request whose body has the fingerprint fp and
// returns the new value once the journal line
// and the counter are durable. On error the effect did not happen as far as
// this Counter knows: its value is unchanged and the next journal line
// overwrites the failed one, unless the rename already replaced the file,
// in which case the value follows the file and the error says the folder
// sync failed.
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
	if err := store.Sync(c.dir); err != nil {
		return true, err
	}
	return true, nil
}

// Recorded returns nothing: the volatile store keeps no keys (its server's
// registry, in memory, is the only record), which is the design under test.
func (c *Counter) Recorded() ([]store.Record, error) { return nil, nil }

// Apply increments the counter for in (the effect, durable before it
// returns), then calls afterEffect. It records no key: completing the
// server's registry ticket afterwards is the record. It makes *Counter a
// store.Store, the volatile one.
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

// Close releases the state folder; every increment is already durable.
// Later calls do nothing.
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

package volatile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"idemlab/internal/safefile"
	"idemlab/internal/store"
)

// JournalName is the journal's name inside the state folder.
const JournalName = "effects.log"

// ReadState returns the counter of dir and the effects its journal lists,
// in the order applied: effect i produced value i+1. It reads without
// changing anything, for use after the server has exited; missing files
// mean 0 and no effects. Journal lines a crash left beyond the counter are
// not effects and are left out. A journal with fewer effects than the
// counter, or a malformed one, is an error naming the file.
func ReadState(dir string) (store.State, error) {
	v, err := Read(dir)
	if err != nil {
		return store.State{}, err
	}
	j, err := readJournal(filepath.Join(dir, JournalName), v)
	if err != nil {
		return store.State{}, err
	}
	return store.State{Counter: v, Effects: j.effects}, nil
}

// journal is what readJournal found.
type journal struct {
	exists  bool
	effects []store.Effect // the effects up to the counter
	size    int64          // bytes holding them
	tail    int64          // bytes after them (a crash's leftover), to cut off
}

// readJournal parses the journal at path against the counter value v. A
// journal that is not a regular file (a FIFO, a device, a symlink, a
// folder) is an error naming it, returned at once.
func readJournal(path string, v int64) (journal, error) {
	f, err := safefile.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		if v != 0 {
			return journal{}, fmt.Errorf("effects log %s: missing, but the counter holds %d", path, v)
		}
		return journal{}, nil
	}
	if err != nil {
		return journal{}, fmt.Errorf("effects log: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return journal{}, fmt.Errorf("read effects log %s: %w", path, err)
	}
	j := journal{exists: true}
	rest := b
	for n := int64(1); n <= v; n++ {
		line, after, ok := bytes.Cut(rest, []byte("\n"))
		if !ok {
			return journal{}, fmt.Errorf("effects log %s: holds %d effects, but the counter holds %d", path, n-1, v)
		}
		e, err := parseLine(line, n)
		if err != nil {
			return journal{}, fmt.Errorf("effects log %s: line %d: %w", path, n, err)
		}
		j.effects = append(j.effects, e)
		j.size += int64(len(line)) + 1
		rest = after
	}
	// What follows is at most one line, torn or whole, for effect v+1: the
	// journal is written before the counter.
	if len(rest) > 0 {
		line, after, whole := bytes.Cut(rest, []byte("\n"))
		if whole {
			if _, err := parseLine(line, v+1); err != nil || len(after) > 0 {
				return journal{}, fmt.Errorf("effects log %s: unexpected content after line %d (the counter holds %d)", path, v, v)
			}
		}
		j.tail = int64(len(rest))
	}
	return j, nil
}

// parseLine parses "<value> <sha256hex>" and checks the value is want.
func parseLine(line []byte, want int64) (store.Effect, error) {
	num, sum, ok := bytes.Cut(line, []byte(" "))
	if !ok || !isSHA256Hex(string(sum)) {
		return store.Effect{}, fmt.Errorf("malformed %s (want a value, a space and a SHA-256 in hex)", quote(line))
	}
	v, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != string(num) {
		return store.Effect{}, fmt.Errorf("malformed value in %s", quote(line))
	}
	if v != want {
		return store.Effect{}, fmt.Errorf("value %d, want %d (effects are journaled in counter order)", v, want)
	}
	return store.Effect{Value: v, BodySHA256: string(sum)}, nil
}

// isSHA256Hex reports whether s is 64 lowercase hex digits.
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// appendJournal writes line at the end of the effects up to the counter and
// makes it durable. It overwrites whatever a failed increment left there.
func (c *Counter) appendJournal(line string) error {
	f, err := os.OpenFile(c.journal, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("write effects log %s: %w", c.journal, err)
	}
	defer f.Close()
	end := c.jsize + int64(len(line))
	if _, err := f.WriteAt([]byte(line), c.jsize); err != nil {
		f.Truncate(c.jsize)
		return fmt.Errorf("write effects log %s: %w", c.journal, err)
	}
	if err := f.Truncate(end); err != nil {
		return fmt.Errorf("write effects log %s: %w", c.journal, err)
	}
	if err := f.Sync(); err != nil {
		f.Truncate(c.jsize)
		return fmt.Errorf("sync effects log %s: %w", c.journal, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close effects log %s: %w", c.journal, err)
	}
	if !c.jcreated {
		// The journal's folder entry must be durable before the counter
		// says an effect happened.
		if err := syncDir(c.dir); err != nil {
			return err
		}
		c.jcreated = true
	}
	return nil
}

// truncate cuts the file at path to size and makes that durable.
func truncate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("repair effects log %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("repair effects log %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("repair effects log %s: %w", path, err)
	}
	return f.Close()
}

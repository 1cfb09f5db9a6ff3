package volatile

import (
	"bufio"
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

// ReadState returns the counter of dir and its journal's effects, changing
// nothing; what a crash left beyond the counter is left out. A journal
// short of the counter, malformed, or with a tail no crash leaves is an
// error.
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

// MaxRecordLen is the longest journal record: the largest counter value
// (19 digits), a space, a SHA-256 in hex and a newline. A crash while one
// is written leaves at most MaxRecordLen-1 bytes without a newline.
const MaxRecordLen = 19 + 1 + 64 + 1

// journal is what readJournal found.
type journal struct {
	exists  bool
	effects []store.Effect // the effects up to the counter
	size    int64          // bytes holding them
	tail    int64          // bytes after them (a crash's leftover), to cut off
	torn    []byte         // the tail when it is a torn record (no newline)
}

// readJournal parses the journal at path against the counter v. After v's
// effects it accepts only what a crash leaves: one whole record for v+1 or
// a torn prefix of one, so that Open never cuts more than one record.
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
	fi, err := f.Stat()
	if err != nil {
		return journal{}, fmt.Errorf("effects log %s: %w", path, err)
	}
	r := bufio.NewReader(f)
	j := journal{exists: true}
	for n := int64(1); n <= v; n++ {
		line, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, io.EOF):
			return journal{}, fmt.Errorf("effects log %s: holds %d effects, but the counter holds %d", path, n-1, v)
		case err == nil && len(line) > MaxRecordLen, errors.Is(err, bufio.ErrBufferFull):
			return journal{}, fmt.Errorf("effects log %s: line %d: longer than a record (%d bytes)", path, n, MaxRecordLen)
		case err != nil:
			return journal{}, fmt.Errorf("read effects log %s: %w", path, err)
		}
		e, err := parseLine(line[:len(line)-1], n)
		if err != nil {
			return journal{}, fmt.Errorf("effects log %s: line %d: %w", path, n, err)
		}
		j.effects = append(j.effects, e)
		j.size += int64(len(line))
	}
	rest := fi.Size() - j.size
	if rest <= 0 {
		return j, nil
	}
	tail, err := io.ReadAll(io.LimitReader(r, MaxRecordLen+1))
	if err != nil {
		return journal{}, fmt.Errorf("read effects log %s: %w", path, err)
	}
	if line, after, whole := bytes.Cut(tail, []byte("\n")); whole {
		if _, err := parseLine(line, v+1); err != nil || len(after) > 0 {
			return journal{}, fmt.Errorf("effects log %s: unexpected content after line %d (the counter holds %d): %d bytes after it", path, v, v, rest)
		}
	} else if rest >= MaxRecordLen {
		return journal{}, fmt.Errorf("effects log %s: %d bytes after line %d without a newline, more than a torn record can hold "+
			"(%d bytes): refusing to cut them; inspect or remove the file", path, rest, v, MaxRecordLen-1)
	} else if !tornRecord(tail, v+1) {
		return journal{}, fmt.Errorf("effects log %s: %d bytes after line %d without a newline, %s, are not the beginning of "+
			"a record for effect %d: refusing to cut them; inspect or remove the file", path, rest, v, quote(tail), v+1)
	} else {
		j.torn = tail
	}
	j.tail = rest
	return j, nil
}

// tornRecord reports whether b can be a prefix of effect want's record.
func tornRecord(b []byte, want int64) bool {
	head := strconv.FormatInt(want, 10) + " "
	if len(b) > len(head)+64 {
		return false
	}
	n := min(len(b), len(head))
	return string(b[:n]) == head[:n] && isLowerHex(string(b[n:]))
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
func isSHA256Hex(s string) bool { return len(s) == 64 && isLowerHex(s) }

// isLowerHex reports whether s holds only lowercase hex digits.
func isLowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// appendJournal writes line after the counter's effects, over whatever a
// failed increment left, and makes it durable.
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
		if err := store.Sync(c.dir); err != nil {
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

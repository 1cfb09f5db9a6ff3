package volatile

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"idemlab/internal/store"
)

// fp is the body fingerprint most tests journal, sum its hex form.
var (
	fp  = store.FingerprintOf([]byte("add-one"))
	sum = fp.Hex()
)

// fpOf is the fingerprint of body; hexSum its hex form, as the journal keeps it.
func fpOf(body string) store.Fingerprint { return store.FingerprintOf([]byte(body)) }
func hexSum(body string) string          { return fpOf(body).Hex() }

// Ensure every increment journals its value and body hash, in order, and ReadState returns them.
func TestJournalRecordsEachEffect(t *testing.T) {
	dir := t.TempDir()
	if st, err := ReadState(dir); err != nil || st.Counter != 0 || st.Effects != nil {
		t.Fatalf("ReadState(empty) = %+v, %v, want zero", st, err)
	}
	c := open(t, dir)
	bodies := []string{"add-one", "other", "add-one"}
	var want []store.Effect
	for i, b := range bodies {
		if _, err := c.Increment(fpOf(b)); err != nil {
			t.Fatal(err)
		}
		want = append(want, store.Effect{Value: int64(i + 1), BodySHA256: hexSum(b)})
	}
	st, err := ReadState(dir)
	v, got := st.Counter, st.Effects
	if err != nil || v != 3 || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadState = %d, %v, %v, want 3, %v, nil", v, got, err, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "1 "+hexSum("add-one")+"\n2 "+hexSum("other")+"\n3 "+hexSum("add-one")+"\n"; got != want {
		t.Fatalf("journal = %q, want %q", got, want)
	}
}

// Ensure what a crash can leave after the counter (a whole line for the next
// value, or a torn line) is ignored by ReadState and cut off by Open.
func TestJournalCrashLeftovers(t *testing.T) {
	whole := "1 " + sum + "\n"
	tests := []struct {
		name, journal string
	}{
		{"nothing after", whole},
		{"next line journaled, counter not written", whole + "2 " + sum + "\n"},
		{"torn line", whole + "2 " + sum[:10]},
		{"torn value", whole + "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeState(t, dir, "1\n", tt.journal)
			want := []store.Effect{{Value: 1, BodySHA256: sum}}
			if st, err := ReadState(dir); err != nil || st.Counter != 1 || !reflect.DeepEqual(st.Effects, want) {
				t.Fatalf("ReadState = %+v, %v, want 1, %v, nil", st, err, want)
			}
			c := open(t, dir)
			if got, err := c.Increment(fpOf("x")); err != nil || got != 2 {
				t.Fatalf("Increment = %d, %v, want 2, nil", got, err)
			}
			b, err := os.ReadFile(filepath.Join(dir, JournalName))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(b), whole+"2 "+hexSum("x")+"\n"; got != want {
				t.Fatalf("journal = %q, want %q", got, want)
			}
		})
	}
}

// Ensure a journal that cannot belong to the counter is an error naming it.
func TestJournalMalformed(t *testing.T) {
	line := func(v string) string { return v + " " + sum + "\n" }
	tests := []struct {
		name, counter, journal, want string
	}{
		{"missing with a counter", "2\n", "", "missing, but the counter holds 2"},
		{"behind the counter", "2\n", line("1"), "holds 1 effects, but the counter holds 2"},
		{"out of order", "2\n", line("2") + line("1"), "line 1: value 2, want 1"},
		{"bad hash", "1\n", "1 abc\n", "line 1: malformed"},
		{"upper-case hash", "1\n", "1 " + strings.ToUpper(sum) + "\n", "line 1: malformed"},
		{"leading zero", "1\n", line("01"), "line 1: malformed value"},
		{"two lines ahead", "1\n", line("1") + line("2") + line("3"), "unexpected content after line 1"},
		{"wrong next value", "1\n", line("1") + line("3"), "unexpected content after line 1"},
		{"ahead without a counter", "", line("1") + line("2"), "unexpected content after line 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeState(t, dir, tt.counter, tt.journal)
			if tt.name == "missing with a counter" {
				os.Remove(filepath.Join(dir, JournalName))
			}
			path := filepath.Join(dir, JournalName)
			for name, err := range map[string]error{"ReadState": readStateErr(dir), "Open": openErr(dir)} {
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s error = %v, want one naming %s and saying %q", name, err, path, tt.want)
				}
			}
		})
	}
}

// Ensure a failed increment leaves no journal line behind, and the next one follows the counter.
func TestJournalFailedIncrement(t *testing.T) {
	dir := removableDir(t)
	c := open(t, dir)
	if _, err := c.Increment(fp); err != nil {
		t.Fatal(err)
	}
	// The journal line is written, the counter file cannot be: a non-empty
	// folder stands where the rename must go.
	counter := filepath.Join(dir, FileName)
	if err := os.Remove(counter); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(counter, "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Increment(fpOf("lost")); err == nil {
		t.Fatal("Increment with its rename blocked succeeded")
	}
	if err := os.RemoveAll(counter); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Increment(fpOf("next")); err != nil || got != 2 {
		t.Fatalf("Increment after recovery = %d, %v, want 2, nil", got, err)
	}
	want := []store.Effect{{Value: 1, BodySHA256: sum}, {Value: 2, BodySHA256: hexSum("next")}}
	if st, err := ReadState(dir); err != nil || st.Counter != 2 || !reflect.DeepEqual(st.Effects, want) {
		t.Fatalf("ReadState = %+v, %v, want 2, %v, nil", st, err, want)
	}
}

func readStateErr(dir string) error { _, err := ReadState(dir); return err }
func openErr(dir string) error      { _, err := Open(dir); return err }

// writeState writes the counter file (unless counter is "") and the journal.
func writeState(t *testing.T, dir, counter, journal string) {
	t.Helper()
	if counter != "" {
		if err := os.WriteFile(filepath.Join(dir, FileName), []byte(counter), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, JournalName), []byte(journal), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Ensure Open cuts a tail without a newline only when it can be one torn
// record, says what it cut (Repairs), and otherwise refuses, naming the
// file and the byte count and leaving the file as it was; ReadState agrees.
func TestJournalTailBound(t *testing.T) {
	whole := "1 " + sum + "\n"
	tests := []struct {
		name, tail string
		want       string // in the error; "" means cut, and Repairs says so
	}{
		{"torn after the value", "2 ", ""},
		{"torn one byte short of the newline", "2 " + sum, ""},
		{"whole next record", "2 " + sum + "\n", ""},
		{"one byte over a record, no newline", strings.Repeat("2", MaxRecordLen), fmt.Sprintf("%d bytes after line 1 without a newline, more than a torn record", MaxRecordLen)},
		{"a megabyte, no newline", strings.Repeat("x", 1<<20), fmt.Sprintf("%d bytes after line 1 without a newline", 1<<20)},
		{"short garbage", "garbage", "7 bytes after line 1 without a newline, \"garbage\", are not the beginning of a record for effect 2"},
		{"wrong value", "3 ab", "4 bytes after line 1 without a newline"},
		{"upper-case hex", "2 AB", "4 bytes after line 1 without a newline"},
		{"whole record then garbage", "2 " + sum + "\nxyz", "unexpected content after line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeState(t, dir, "1\n", whole+tt.tail)
			path := filepath.Join(dir, JournalName)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Open(dir)
			_, rerr := ReadState(dir)
			if tt.want != "" {
				for what, err := range map[string]error{"Open": err, "ReadState": rerr} {
					if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
						t.Errorf("%s error = %v, want one naming %s and saying %q", what, err, path, tt.want)
					}
				}
				if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
					t.Errorf("journal changed by a refused Open (%d bytes, was %d)", len(after), len(before))
				}
				return
			}
			if err != nil || rerr != nil {
				t.Fatalf("Open, ReadState = %v, %v, want nil", err, rerr)
			}
			defer c.Close()
			if b, err := os.ReadFile(path); err != nil || string(b) != whole {
				t.Errorf("journal after Open = %q, %v, want %q", b, err, whole)
			}
			r := c.Repairs()
			if len(r) != 1 || !strings.Contains(r[0], path) || !strings.Contains(r[0], fmt.Sprintf("(%d bytes)", len(tt.tail))) && !strings.Contains(r[0], fmt.Sprintf("of %d bytes", len(tt.tail))) {
				t.Errorf("Repairs() = %q, want one line naming %s and the %d bytes cut", r, path, len(tt.tail))
			}
		})
	}
}

// Ensure MaxRecordLen is the length of the longest record the journal writes.
func TestMaxRecordLen(t *testing.T) {
	if got, want := len(strconv.FormatInt(math.MaxInt64, 10)+" "+sum+"\n"), MaxRecordLen; got != want {
		t.Fatalf("longest record = %d bytes, MaxRecordLen = %d", got, want)
	}
}

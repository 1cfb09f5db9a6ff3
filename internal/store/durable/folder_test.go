package durable

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/store"
	"idemlab/internal/store/storetest"
	"idemlab/internal/store/volatile"
)

// Ensure state folders that would silently start from zero, or hold a
// database whose counter disagrees with its journal, are refused by Open,
// naming the file, and left as they were.
func TestOpenRefusesState(t *testing.T) {
	made := func(stmts string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			s := open(t, dir, 8)
			if _, err := s.Apply(store.Intent{Key: "k", Fingerprint: fp("a")}, noHook); err != nil {
				t.Fatal(err)
			}
			s.Close()
			storetest.SQLiteExec(t, filepath.Join(dir, FileName), stmts)
		}
	}
	file := func(name, content string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		file  string // the file the error names
		want  string
		read  bool // ReadState refuses it too
	}{
		{"empty file", file(FileName, ""), FileName, "empty (0 bytes)", true},
		{"no tables", func(t *testing.T, dir string) {
			storetest.SQLiteExec(t, filepath.Join(dir, FileName), `CREATE TABLE t (x); DROP TABLE t`)
		}, FileName, "not an idemlab state database", true},
		{"foreign tables", func(t *testing.T, dir string) {
			storetest.SQLiteExec(t, filepath.Join(dir, FileName), `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER); INSERT INTO accounts VALUES (1, 100)`)
		}, FileName, "not an idemlab state database", true},
		{"counter ahead of journal", made(`UPDATE state SET counter = 500`), FileName, "counter holds 500, but 1 effects are journaled", true},
		{"journal ahead of counter", made(`INSERT INTO effects VALUES (2, 'x')`), FileName, "counter holds 1, but 2 effects are journaled", true},
		{"journal gap", made(`UPDATE state SET counter = 2; INSERT INTO effects VALUES (3, 'x')`), FileName, "values 1 to 3", true},
		{"key count", made(`UPDATE state SET keys = 3`), FileName, "3 keys counted, but 1 recorded", false},
		{"no state row", made(`DELETE FROM state`), FileName, "no state row", true},
		{"volatile counter", file(volatile.FileName, "3\n"), volatile.FileName, "belongs to the volatile store", false},
		{"volatile journal", file(volatile.JournalName, ""), volatile.JournalName, "belongs to the volatile store", false},
		{"log without database", file(FileName+"-wal", "x"), FileName + "-wal", "without " + FileName, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			before := snapshot(t, dir)
			path := filepath.Join(dir, tt.file)
			if err := openErr(dir); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open error = %v, want one naming %s and saying %q", err, path, tt.want)
			}
			if err := readStateErr(dir); tt.read && (err == nil || !strings.Contains(err.Error(), path)) {
				t.Errorf("ReadState error = %v, want one naming %s", err, path)
			}
			if after := snapshot(t, dir); !bytes.Equal(after, before) {
				t.Errorf("Open changed the folder:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// snapshot names every file in dir and its content's hash, to compare.
func snapshot(t *testing.T, dir string) []byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s (%d bytes, sha256 %x) ", e.Name(), len(data), sha256.Sum256(data))
	}
	return b.Bytes()
}

// Ensure a folder a volatile server holds is refused, and a folder durable
// stores hold is refused to the volatile store, while durable stores share
// a folder.
func TestOpenFolderLock(t *testing.T) {
	dir := t.TempDir()
	c, err := volatile.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := openErr(dir); err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "a volatile server holds it") {
		t.Errorf("Open beside a volatile store: %v, want an error naming %s and the volatile server", err, dir)
	}
	c.Close()
	open(t, dir, 8)
	open(t, dir, 8) // shared
	if c, err := volatile.Open(dir); err == nil || !strings.Contains(err.Error(), "another server holds it") {
		if c != nil {
			c.Close()
		}
		t.Errorf("volatile Open beside durable stores: %v, want another server holds it", err)
	}
}

// Ensure a database holding more keys than the store's capacity is refused
// with both numbers, and Keys reports the recorded count.
func TestOpenCapacity(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 3)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Apply(store.Intent{Key: k, Fingerprint: fp(k)}, noHook); err != nil {
			t.Fatal(err)
		}
	}
	var keys int64
	if err := s.db.QueryRow(`SELECT keys FROM state WHERE id = 1`).Scan(&keys); err != nil || keys != 3 {
		t.Fatalf("the state row counts %d keys (%v), want 3", keys, err)
	}
	s.Close()
	path := filepath.Join(dir, FileName)
	if err := openErr2(dir, 2); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "3 keys recorded, more than the capacity of 2") {
		t.Fatalf("Open with capacity 2: %v, want one naming %s and both numbers", err, path)
	}
	if err := openErr2(dir, 3); err != nil {
		t.Fatalf("Open with capacity 3: %v", err)
	}
}

func openErr2(dir string, capacity int) error {
	s, err := Open(dir, capacity)
	if err == nil {
		s.Close()
	}
	return err
}

// Ensure the volatile store's file names this package refuses are the
// ones that store uses.
func TestVolatileNames(t *testing.T) {
	if got, want := volatileFiles, []string{volatile.FileName, volatile.JournalName}; !equal(got, want) {
		t.Fatalf("volatileFiles = %q, want %q", got, want)
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

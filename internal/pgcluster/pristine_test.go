package pgcluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Ensure the key of a kept initdb output changes with what changes that
// output: either program's bytes or change time, initdb's arguments.
func TestPristineKey(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("v1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-U", "postgres", "--no-sync"}
	base := pristineKey(bin, args)
	if base == "" || pristineKey(bin, args) != base {
		t.Fatalf("key %q, then %q: want one stable key", base, pristineKey(bin, args))
	}
	if pristineKey(bin, []string{"-U", "other", "--no-sync"}) == base {
		t.Error("other initdb arguments gave the same key")
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(bin, "postgres"), later, later); err != nil {
		t.Fatal(err)
	}
	if pristineKey(bin, args) == base {
		t.Error("a postgres program changed since gave the same key")
	}
	if err := os.WriteFile(filepath.Join(bin, "initdb"), []byte("v2 longer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if pristineKey(bin, args) == base {
		t.Error("an initdb program of other bytes gave the same key")
	}
	if got := pristineKey(t.TempDir(), args); got != "" {
		t.Errorf("key without the programs = %q, want none", got)
	}
}

// Ensure the kept entries stay bounded: the most recently made are kept,
// an entry still being made is not touched.
func TestTrimPristine(t *testing.T) {
	parent := t.TempDir()
	names := []string{"a", "b", "c", "d", "e", "f"}
	for i, n := range append(slices.Clone(names), ".making-1") {
		dir := filepath.Join(parent, n)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
	}
	trimPristine(parent)
	var left []string
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{".making-1", "c", "d", "e", "f"}; !slices.Equal(left, want) {
		t.Errorf("left %q, want %q (the %d most recent and the one being made)", left, want, maxPristine)
	}
}

// Ensure a kept entry is copied whole, and one damaged in its bytes or
// missing its digest is never copied: it is dropped, to be kept again.
func TestPristineDamaged(t *testing.T) {
	tmp := t.TempDir()
	data := filepath.Join(tmp, "data")
	for name, body := range map[string]string{"PG_VERSION": "15\n", "base/1/1259": "catalog", "pg_wal/000000010000000000000001": "wal"} {
		p := filepath.Join(data, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entry := filepath.Join(tmp, "cache", "key")
	copyTo := func(name string) (string, bool) {
		out := filepath.Join(tmp, name)
		return out, fromPristine(entry, out, nil)
	}
	if _, ok := copyTo("none"); ok {
		t.Fatal("copied an entry never kept")
	}
	keepPristine(entry, data)
	out, ok := copyTo("whole")
	if b, err := os.ReadFile(filepath.Join(out, "base", "1", "1259")); !ok || string(b) != "catalog" {
		t.Fatalf("copy of a whole entry: %v, base/1/1259 %q (%v)", ok, b, err)
	}
	for _, damage := range []struct {
		name string
		do   func() error
	}{
		{"a byte added", func() error {
			return os.WriteFile(filepath.Join(entry, "data", "base", "1", "1259"), []byte("catalog!"), 0o600)
		}},
		{"a file added", func() error {
			return os.WriteFile(filepath.Join(entry, "data", "postgresql.auto.conf"), []byte("fsync = off\n"), 0o600)
		}},
		{"the digest removed", func() error { return os.Remove(filepath.Join(entry, pristineDigest)) }},
	} {
		if err := damage.do(); err != nil {
			t.Fatal(err)
		}
		out, ok := copyTo(damage.name)
		if ok {
			t.Errorf("%s: the entry was copied", damage.name)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: a partial copy is left: %v", damage.name, err)
		}
		if _, err := os.Stat(entry); !os.IsNotExist(err) {
			t.Errorf("%s: the damaged entry is kept: %v", damage.name, err)
		}
		keepPristine(entry, data)
	}
}

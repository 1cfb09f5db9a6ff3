package durable

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"idemlab/internal/store"
	"idemlab/internal/store/internal/groupcommit"
	"idemlab/internal/store/storetest"
)

// childEnv makes the test binary a child that applies one intent and
// crashes at the point named by its value (see TestMain).
const childEnv = "IDEMLAB_DURABLESTORE_CHILD"

// TestMain lets the test binary be the child process that crashes.
func TestMain(m *testing.M) {
	if point := os.Getenv(childEnv); point == openChild {
		os.Exit(openAndApply(os.Getenv(childEnv + "_DIR")))
	} else if point != "" {
		os.Exit(child(point, os.Getenv(childEnv+"_DIR")))
	}
	os.Exit(m.Run())
}

// child applies the intent "k" in dir and exits with 23 at point: between
// the effect statement and the key's row ("after-effect"), or after the
// commit without closing the store ("after-commit"). Other exits are failures.
func child(point, dir string) int {
	s, err := Open(dir, 8)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err = s.Apply(store.Intent{Key: "k", Fingerprint: fp("add-one")}, func() error {
		if point == "after-effect" {
			os.Exit(23)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if point == "after-commit" {
		os.Exit(23)
	}
	return 1
}

func fp(body string) store.Fingerprint { return store.FingerprintOf([]byte(body)) }

func noHook() error { return nil }

func open(t *testing.T, dir string, capacity int) *Store {
	t.Helper()
	s, err := Open(dir, capacity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// raw is what the tables hold, read around the store.
type raw struct {
	counter, keys, effects int64
	keyRows                []string
}

func readRaw(t *testing.T, dir string) raw {
	t.Helper()
	db := storetest.SQLite(t, filepath.Join(dir, FileName))
	var r raw
	if err := db.QueryRow(`SELECT counter, keys, (SELECT count(*) FROM effects) FROM state`).Scan(&r.counter, &r.keys, &r.effects); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT key FROM keys ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		r.keyRows = append(r.keyRows, k)
	}
	return r
}

// Ensure Apply's outcomes: effect, replay, conflict, full, unkeyed past capacity.
func TestApply(t *testing.T) {
	type step struct {
		key, body string
		want      store.Result
		err       error
	}
	tests := []struct {
		name  string
		steps []step
		raw   raw
	}{
		{"unkeyed twice", []step{{"", "a", store.Result{Value: 1}, nil}, {"", "a", store.Result{Value: 2}, nil}},
			raw{counter: 2, effects: 2}},
		{"keyed then replay", []step{{"k", "a", store.Result{Value: 1}, nil}, {"k", "a", store.Result{Value: 1, Replayed: true}, nil}},
			raw{counter: 1, keys: 1, effects: 1, keyRows: []string{"k"}}},
		{"other body conflicts", []step{{"k", "a", store.Result{Value: 1}, nil}, {"k", "b", store.Result{}, store.ErrConflict}},
			raw{counter: 1, keys: 1, effects: 1, keyRows: []string{"k"}}},
		{"full", []step{{"a", "x", store.Result{Value: 1}, nil}, {"b", "x", store.Result{Value: 2}, nil}, {"c", "x", store.Result{}, store.ErrFull},
			{"a", "x", store.Result{Value: 1, Replayed: true}, nil}, {"", "x", store.Result{Value: 3}, nil}},
			raw{counter: 3, keys: 2, effects: 3, keyRows: []string{"a", "b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, 2)
			for i, st := range tt.steps {
				got, err := s.Apply(store.Intent{Key: st.key, Fingerprint: fp(st.body)}, noHook)
				if got != st.want || !errors.Is(err, st.err) {
					t.Fatalf("step %d: Apply = %+v, %v, want %+v, %v", i, got, err, st.want, st.err)
				}
			}
			if got := readRaw(t, dir); !reflect.DeepEqual(got, tt.raw) {
				t.Fatalf("tables = %+v, want %+v", got, tt.raw)
			}
		})
	}
}

// Ensure a committed key and effect survive Close and come back from Recorded and ReadState.
func TestCommitSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(store.Intent{Key: "k", Fingerprint: fp("a")}, noHook); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(store.Intent{Fingerprint: fp("b")}, noHook); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(store.Intent{}, noHook); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close: %v, want ErrClosed", err)
	}
	st, err := ReadState(dir)
	counter, effects := st.Counter, st.Effects
	want := []store.Effect{{Value: 1, BodySHA256: hexFP("a")}, {Value: 2, BodySHA256: hexFP("b")}}
	if err != nil || counter != 2 || !reflect.DeepEqual(effects, want) {
		t.Fatalf("ReadState = %d, %v, %v, want 2, %v, nil", counter, effects, err, want)
	}
	s2 := open(t, dir, 8)
	keys, err := s2.Recorded()
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.Record{{Key: "k", Fingerprint: fp("a"), Value: 1}}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("Recorded() = %v, want %v", keys, want)
	}
	if got, err := s2.Apply(store.Intent{Key: "k", Fingerprint: fp("a")}, noHook); err != nil || got != (store.Result{Value: 1, Replayed: true}) {
		t.Fatalf("Apply after reopen = %+v, %v, want a replay of 1", got, err)
	}
}

func hexFP(body string) string {
	f := fp(body)
	return fmt.Sprintf("%x", f[:])
}

// Ensure a failed statement or hook rolls the intent back: neither effect nor key, and a retry runs.
func TestFailureRollsBack(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) (hook func() error, undo func())
	}{
		{"hook fails", func(t *testing.T, dir string) (func() error, func()) {
			return func() error { return errors.New("hook says no") }, func() {}
		}},
		{"effects row refused", func(t *testing.T, dir string) (func() error, func()) {
			// A row already holding value 1 makes the effect's insert fail
			// after the counter update ran.
			exec := func(q string) { storetest.SQLiteExec(t, filepath.Join(dir, FileName)+"?_busy_timeout=5000", q) }
			exec(`INSERT INTO effects VALUES (1, 'blocker')`)
			return noHook, func() { exec(`DELETE FROM effects WHERE value = 1`) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, 8)
			hook, undo := tt.setup(t, dir)
			if _, err := s.Apply(store.Intent{Key: "k", Fingerprint: fp("a")}, hook); err == nil {
				t.Fatal("Apply succeeded, want an error")
			}
			undo()
			if got, want := readRaw(t, dir), (raw{}); !reflect.DeepEqual(got, want) {
				t.Fatalf("tables after the failure = %+v, want %+v", got, want)
			}
			if got, err := s.Apply(store.Intent{Key: "k", Fingerprint: fp("a")}, noHook); err != nil || got != (store.Result{Value: 1}) {
				t.Fatalf("retry = %+v, %v, want 1 not replayed", got, err)
			}
		})
	}
}

// Ensure intents sharing one transaction fail alone: one failing hook rolls
// back only its own savepoint, the others commit.
func TestBatchIntentFailsAlone(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 8)
	boom := errors.New("boom")
	var batch []*queued
	for _, p := range []pending{
		{in: store.Intent{Key: "a", Fingerprint: fp("a")}, afterEffect: noHook},
		{in: store.Intent{Key: "b", Fingerprint: fp("b")}, afterEffect: func() error { return boom }},
		{in: store.Intent{Key: "c", Fingerprint: fp("c")}, afterEffect: noHook},
		{in: store.Intent{Key: "a", Fingerprint: fp("a")}, afterEffect: noHook},
	} {
		batch = append(batch, groupcommit.NewCall[pending, outcome](p))
	}
	if carry := s.runBatch(batch); len(carry) != 0 {
		t.Fatalf("runBatch carried %d intents over, want none", len(carry))
	}
	want := []outcome{{res: store.Result{Value: 1}}, {err: boom}, {res: store.Result{Value: 2}}, {res: store.Result{Value: 1, Replayed: true}}}
	for i, c := range batch {
		if got := c.Wait(); got != want[i] {
			t.Errorf("intent %d: %+v, want %+v", i, got, want[i])
		}
	}
	if got, want := readRaw(t, dir), (raw{counter: 2, keys: 2, effects: 2, keyRows: []string{"a", "c"}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("tables = %+v, want %+v", got, want)
	}
}

// Ensure a real crash between the effect statement and the commit leaves
// neither effect nor key, and a crash after the commit leaves both.
func TestCrashInChild(t *testing.T) {
	tests := []struct {
		point string
		raw   raw
	}{
		{"after-effect", raw{}},
		{"after-commit", raw{counter: 1, keys: 1, effects: 1, keyRows: []string{"k"}}},
	}
	for _, tt := range tests {
		t.Run(tt.point, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+tt.point, childEnv+"_DIR="+dir, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
			out, err := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 23 {
				t.Fatalf("child exit = %d (%v), want 23; output:\n%s", code, err, out)
			}
			st, err := ReadState(dir) // straight after the crash, WAL and all
			counter, effects := st.Counter, st.Effects
			if err != nil || counter != tt.raw.counter || int64(len(effects)) != tt.raw.effects {
				t.Fatalf("ReadState after the crash = %d, %v, %v, want %d and %d effects", counter, effects, err, tt.raw.counter, tt.raw.effects)
			}
			s := open(t, dir, 8)
			if got := readRaw(t, dir); !reflect.DeepEqual(got, tt.raw) {
				t.Fatalf("tables after the crash = %+v, want %+v", got, tt.raw)
			}
			want := store.Result{Value: 1, Replayed: tt.raw.keys == 1}
			if got, err := s.Apply(store.Intent{Key: "k", Fingerprint: fp("add-one")}, noHook); err != nil || got != want {
				t.Fatalf("retry = %+v, %v, want %+v", got, err, want)
			}
		})
	}
}

// Ensure two stores on one folder (as two processes would have) racing on
// one key apply its effect once; every loser replays.
func TestTwoStoresOneKey(t *testing.T) {
	dir := t.TempDir()
	stores := []*Store{open(t, dir, 8), open(t, dir, 8)}
	const n = 32
	results := make([]store.Result, 2*n)
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Go(func() {
			results[i], errs[i] = stores[i%2].Apply(store.Intent{Key: "same", Fingerprint: fp("a")}, noHook)
		})
	}
	wg.Wait()
	fresh := 0
	for i := range results {
		if errs[i] != nil || results[i].Value != 1 {
			t.Errorf("Apply %d = %+v, %v, want value 1", i, results[i], errs[i])
		}
		if !results[i].Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d results not replayed, want 1", fresh)
	}
	if got, want := readRaw(t, dir), (raw{counter: 1, keys: 1, effects: 1, keyRows: []string{"same"}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("tables = %+v, want %+v", got, want)
	}
}

// Ensure a file that is not a sound database of this layout is refused, naming it.
func TestOpenRefuses(t *testing.T) {
	sqlFile := func(stmts string) func(string) error {
		return func(path string) error {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = db.Exec(stmts)
			return err
		}
	}
	tests := []struct {
		name  string
		write func(path string) error
		want  string
	}{
		{"garbage", func(p string) error { return os.WriteFile(p, []byte(strings.Repeat("not a database ", 512)), 0o644) }, "file is not a database"},
		{"foreign tables", sqlFile(`CREATE TABLE t (x)`), "not an idemlab state database"},
		{"newer schema", sqlFile(`PRAGMA user_version = 7`), "schema version 7, want 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := tt.write(path); err != nil {
				t.Fatal(err)
			}
			for name, err := range map[string]error{"Open": openErr(dir), "ReadState": readStateErr(dir)} {
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s error = %v, want one naming %s and saying %q", name, err, path, tt.want)
				}
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "nosuch"), 1); err == nil {
		t.Error("Open(missing folder) succeeded")
	}
}

func openErr(dir string) error {
	s, err := Open(dir, 1)
	if err == nil {
		s.Close()
	}
	return err
}

func readStateErr(dir string) error { _, err := ReadState(dir); return err }

// Ensure ReadState of a folder without a database is zero, without creating one.
func TestReadStateMissing(t *testing.T) {
	dir := t.TempDir()
	if st, err := ReadState(dir); err != nil || st.Counter != 0 || st.Effects != nil {
		t.Fatalf("ReadState = %+v, %v, want zero", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); !os.IsNotExist(err) {
		t.Fatalf("ReadState created %s: %v", FileName, err)
	}
}

// Ensure the store's connection really runs in WAL mode with
// synchronous=FULL, as the design requires: the DSN options are easy to
// misspell, and a misspelled one is silently ignored.
func TestPragmas(t *testing.T) {
	s := open(t, t.TempDir(), 8)
	var mode string
	var sync int
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode = %q, synchronous = %d; want wal and 2 (FULL)", mode, sync)
	}
}

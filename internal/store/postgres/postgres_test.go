package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/store"
	"idemlab/internal/store/postgres/redact"
)

func TestMain(m *testing.M) { os.Exit(pgclustertest.Main(m)) }

// newDB returns the DSN of a fresh database for t on the shared cluster.
func newDB(t *testing.T) string {
	t.Helper()
	return pgclustertest.Database(t)
}

// open opens a store on dsn, closed when t ends.
func open(t *testing.T, dsn string, capacity int, wait time.Duration) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, capacity, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// exec runs one statement on dsn from a connection of its own.
func exec(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func intent(key, body string) store.Intent {
	return store.Intent{Key: key, Fingerprint: store.FingerprintOf([]byte(body))}
}

func noHook() error { return nil }

// state reads dsn's state, failing t on an error.
func state(t *testing.T, dsn string) store.State {
	t.Helper()
	st, err := ReadState(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var errHook = errors.New("hook refused")

// Ensure each intent gets the contract's answer, in order, on one store
// holding at most two keys.
func TestApplyContract(t *testing.T) {
	dsn := newDB(t)
	s := open(t, dsn, 2, time.Second)
	steps := []struct {
		name    string
		in      store.Intent
		hookErr error
		want    store.Result
		wantErr error
		hooked  bool // afterEffect called
	}{
		{"new key", intent("a", "x"), nil, store.Result{Value: 1}, nil, true},
		{"replay", intent("a", "x"), nil, store.Result{Value: 1, Replayed: true}, nil, false},
		{"conflict", intent("a", "y"), nil, store.Result{}, store.ErrConflict, false},
		{"second key", intent("b", "x"), nil, store.Result{Value: 2}, nil, true},
		{"full", intent("c", "x"), nil, store.Result{}, store.ErrFull, false},
		{"unkeyed when full", intent("", "x"), nil, store.Result{Value: 3}, nil, true},
		{"replay when full", intent("b", "x"), nil, store.Result{Value: 2, Replayed: true}, nil, false},
		{"hook error rolls back", intent("", "z"), errHook, store.Result{}, errHook, true},
		{"unkeyed after rollback", intent("", "x"), nil, store.Result{Value: 4}, nil, true},
	}
	for i, step := range steps {
		hooked := false
		got, err := s.Apply(step.in, func() error { hooked = true; return step.hookErr })
		if !errors.Is(err, step.wantErr) || (step.wantErr == nil && err != nil) {
			t.Fatalf("step %d (%s): Apply error = %v, want %v", i, step.name, err, step.wantErr)
		}
		if got != step.want {
			t.Fatalf("step %d (%s): Apply = %+v, want %+v", i, step.name, got, step.want)
		}
		if hooked != step.hooked {
			t.Fatalf("step %d (%s): afterEffect called = %v, want %v", i, step.name, hooked, step.hooked)
		}
	}
	st := state(t, dsn)
	if got, want := st.Counter, int64(4); got != want {
		t.Fatalf("counter = %d, want %d", got, want)
	}
	x := store.FingerprintOf([]byte("x")).Hex()
	for i, e := range st.Effects {
		if e.BodySHA256 != x {
			t.Errorf("effect %d body = %s, want the fingerprint of x", i+1, e.BodySHA256)
		}
	}
	recs, err := s.Recorded()
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Record{{Key: "a", Fingerprint: store.FingerprintOf([]byte("x")), Value: 1}, {Key: "b", Fingerprint: store.FingerprintOf([]byte("x")), Value: 2}}
	if fmt.Sprint(recs) != fmt.Sprint(want) {
		t.Fatalf("Recorded = %v, want %v", recs, want)
	}
}

// Ensure a keyed intent whose afterEffect fails leaves nothing (no effect,
// no journal row, no key), so a retry with the key applies it, once.
func TestAfterEffectErrorRollsBackEverything(t *testing.T) {
	dsn := newDB(t)
	s := open(t, dsn, 10, time.Second)
	if _, err := s.Apply(intent("k", "x"), func() error { return errHook }); !errors.Is(err, errHook) {
		t.Fatalf("Apply with a failing hook = %v, want %v", err, errHook)
	}
	if st := state(t, dsn); st.Counter != 0 || len(st.Effects) != 0 {
		t.Fatalf("state after a failed hook = %+v, want nothing", st)
	}
	if recs, err := s.Recorded(); err != nil || len(recs) != 0 {
		t.Fatalf("Recorded after a failed hook = %v, %v; want none", recs, err)
	}
	for _, want := range []store.Result{{Value: 1}, {Value: 1, Replayed: true}} {
		if got, err := s.Apply(intent("k", "x"), noHook); err != nil || got != want {
			t.Fatalf("retry = %+v, %v; want %+v", got, err, want)
		}
	}
}

// Ensure two replicas (two stores on one database) racing one key from many
// goroutines apply it exactly once; every other intent replays its value.
func TestReplicasRaceOneKey(t *testing.T) {
	dsn := newDB(t)
	replicas := []*Store{open(t, dsn, 10, 10*time.Second), open(t, dsn, 10, 10*time.Second)}
	const perReplica = 16
	results := make([]store.Result, 2*perReplica)
	errs := make([]error, len(results))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			results[i], errs[i] = replicas[i%2].Apply(intent("same", "x"), noHook)
		})
	}
	close(start)
	wg.Wait()
	applied := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("intent %d: %v", i, errs[i])
		}
		if r.Value != 1 {
			t.Fatalf("intent %d: value %d, want 1", i, r.Value)
		}
		if !r.Replayed {
			applied++
		}
	}
	if applied != 1 {
		t.Fatalf("%d intents applied the effect, want exactly 1", applied)
	}
	if st := state(t, dsn); st.Counter != 1 {
		t.Fatalf("counter = %d, want 1", st.Counter)
	}
}

// Ensure two replicas applying distinct keys concurrently keep the journal
// exactly 1..counter.
func TestReplicasDistinctKeys(t *testing.T) {
	dsn := newDB(t)
	replicas := []*Store{open(t, dsn, 100, time.Second), open(t, dsn, 100, time.Second)}
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = replicas[i%2].Apply(intent(fmt.Sprint("k", i), "x"), noHook)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if st := state(t, dsn); st.Counter != 40 {
		t.Fatalf("counter = %d, want 40", st.Counter)
	}
}

// owner runs Apply on s for key with an afterEffect that reports it was
// reached and then blocks until release is closed, returning hookErr.
type owner struct {
	inHook chan struct{}
	done   chan struct{}
	res    store.Result
	err    error
}

func startOwner(s *Store, key string, release <-chan struct{}, hookErr error) *owner {
	o := &owner{inHook: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		o.res, o.err = s.Apply(intent(key, "x"), func() error {
			close(o.inHook)
			<-release
			return hookErr
		})
	}()
	return o
}

// Ensure a duplicate on another replica waits for the owner held inside
// afterEffect, gives ErrInProgress after its wait, and leaves the owner to
// finish; afterwards it replays.
func TestWaiterTimesOut(t *testing.T) {
	dsn := newDB(t)
	a, b := open(t, dsn, 10, time.Second), open(t, dsn, 10, 200*time.Millisecond)
	release := make(chan struct{})
	o := startOwner(a, "k", release, nil)
	<-o.inHook
	began := time.Now()
	if _, err := b.Apply(intent("k", "x"), noHook); !errors.Is(err, store.ErrInProgress) {
		t.Fatalf("duplicate while the owner is in flight = %v, want ErrInProgress", err)
	}
	if waited := time.Since(began); waited < 150*time.Millisecond {
		t.Fatalf("duplicate gave up after %v, want about its wait of 200ms", waited)
	}
	close(release)
	<-o.done
	if o.err != nil || o.res != (store.Result{Value: 1}) {
		t.Fatalf("owner = %+v, %v; want value 1", o.res, o.err)
	}
	if got, err := b.Apply(intent("k", "x"), noHook); err != nil || got != (store.Result{Value: 1, Replayed: true}) {
		t.Fatalf("duplicate after the owner = %+v, %v; want a replay of 1", got, err)
	}
}

// Ensure a duplicate that waits long enough shares the owner's result.
func TestWaiterReplaysOwnersResult(t *testing.T) {
	dsn := newDB(t)
	a, b := open(t, dsn, 10, time.Second), open(t, dsn, 10, 30*time.Second)
	release := make(chan struct{})
	o := startOwner(a, "k", release, nil)
	<-o.inHook
	w := startWaiter(b, "k")
	awaitLockWait(t, dsn)
	close(release)
	<-o.done
	<-w.done
	if o.err != nil || o.res != (store.Result{Value: 1}) {
		t.Fatalf("owner = %+v, %v; want value 1", o.res, o.err)
	}
	if w.err != nil || w.res != (store.Result{Value: 1, Replayed: true}) {
		t.Fatalf("waiter = %+v, %v; want a replay of 1", w.res, w.err)
	}
}

// startWaiter runs Apply on s for key in the background.
func startWaiter(s *Store, key string) *owner {
	w := &owner{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.res, w.err = s.Apply(intent(key, "x"), noHook)
	}()
	return w
}

// awaitLockWait waits until a session of dsn's database waits for a lock,
// and returns the PIDs of the backends blocking it.
func awaitLockWait(t *testing.T, dsn string) []int32 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for {
		var blockers []int32
		err := conn.QueryRow(context.Background(), `SELECT coalesce(array_agg(b), '{}') FROM pg_stat_activity,
			unnest(pg_blocking_pids(pid)) AS b WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&blockers)
		if err != nil {
			t.Fatal(err)
		}
		if len(blockers) > 0 {
			return blockers
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waited for a lock within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Ensure an owner whose afterEffect fails (its transaction aborts) hands
// the key to the waiting duplicate, which applies the effect once.
func TestWaiterTakesOverAbortedOwner(t *testing.T) {
	dsn := newDB(t)
	a, b := open(t, dsn, 10, time.Second), open(t, dsn, 10, 30*time.Second)
	release := make(chan struct{})
	o := startOwner(a, "k", release, errHook)
	<-o.inHook
	w := startWaiter(b, "k")
	awaitLockWait(t, dsn)
	close(release)
	<-o.done
	<-w.done
	if !errors.Is(o.err, errHook) {
		t.Fatalf("owner = %+v, %v; want %v", o.res, o.err, errHook)
	}
	if w.err != nil || w.res != (store.Result{Value: 1}) {
		t.Fatalf("waiter = %+v, %v; want it to apply: value 1", w.res, w.err)
	}
	if st := state(t, dsn); st.Counter != 1 {
		t.Fatalf("counter = %d, want 1", st.Counter)
	}
}

// Ensure an owner whose connection dies inside afterEffect (as when its
// process crashes: pg_terminate_backend from a third session) hands the key
// to the waiting duplicate, which applies once; the owner gets
// ErrUnavailable.
func TestWaiterTakesOverTerminatedOwner(t *testing.T) {
	dsn := newDB(t)
	a, b := open(t, dsn, 10, time.Second), open(t, dsn, 10, 30*time.Second)
	release := make(chan struct{})
	o := startOwner(a, "k", release, nil)
	<-o.inHook
	w := startWaiter(b, "k")
	blockers := awaitLockWait(t, dsn)
	exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, blockers)
	<-w.done
	if w.err != nil || w.res != (store.Result{Value: 1}) {
		t.Fatalf("waiter = %+v, %v; want it to apply: value 1", w.res, w.err)
	}
	close(release)
	<-o.done
	if !errors.Is(o.err, store.ErrUnavailable) {
		t.Fatalf("owner whose connection died = %+v, %v; want ErrUnavailable", o.res, o.err)
	}
	if st := state(t, dsn); st.Counter != 1 {
		t.Fatalf("counter = %d, want 1", st.Counter)
	}
}

// Ensure a connection lost during Apply is ErrUnavailable, records
// nothing, and a retry applies exactly once.
func TestConnectionLostIsUnavailable(t *testing.T) {
	dsn := newDB(t)
	s := open(t, dsn, 10, time.Second)
	release := make(chan struct{})
	o := startOwner(s, "k", release, nil)
	<-o.inHook
	exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction'`)
	close(release)
	<-o.done
	if !errors.Is(o.err, store.ErrUnavailable) {
		t.Fatalf("Apply whose connection died = %+v, %v; want ErrUnavailable", o.res, o.err)
	}
	if st := state(t, dsn); st.Counter != 0 {
		t.Fatalf("counter after the lost connection = %d, want 0", st.Counter)
	}
	for _, want := range []store.Result{{Value: 1}, {Value: 1, Replayed: true}} {
		if got, err := s.Apply(intent("k", "x"), noHook); err != nil || got != want {
			t.Fatalf("retry = %+v, %v; want %+v", got, err, want)
		}
	}
}

// Ensure a store whose server is gone answers ErrUnavailable.
func TestServerGoneIsUnavailable(t *testing.T) {
	c := pgclustertest.ForTest(t)
	dsn, err := c.CreateDatabase(context.Background(), "gone")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, dsn, 10, time.Second)
	if _, err := s.Apply(intent("k", "x"), noHook); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(intent("k2", "x"), noHook); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Apply with the server gone = %v, want ErrUnavailable", err)
	}
}

// Ensure a store reopened on its database keeps every key.
func TestReopenKeepsKeys(t *testing.T) {
	dsn := newDB(t)
	s := open(t, dsn, 10, time.Second)
	if _, err := s.Apply(intent("k", "x"), noHook); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dsn, 10, time.Second)
	recs, err := s.Recorded()
	if err != nil || len(recs) != 1 || recs[0].Key != "k" || recs[0].Value != 1 {
		t.Fatalf("Recorded after reopening = %v, %v; want k = 1", recs, err)
	}
	if got, err := s.Apply(intent("k", "x"), noHook); err != nil || got != (store.Result{Value: 1, Replayed: true}) {
		t.Fatalf("Apply after reopening = %+v, %v; want a replay of 1", got, err)
	}
}

// Ensure replicas opening an empty database at once create the tables once.
func TestConcurrentOpens(t *testing.T) {
	dsn := newDB(t)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			s, err := Open(context.Background(), dsn, 10, time.Second)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// Ensure Open refuses a database that is not a store of this layout,
// naming what it found.
func TestOpenRefusesForeignDatabase(t *testing.T) {
	for _, tc := range []struct {
		name, setup, want string
	}{
		{"other tables", `CREATE TABLE accounts (id int)`, "public.accounts"},
		{"other version", `SELECT 1`, "layout version 99, want 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := newDB(t)
			if tc.name == "other version" {
				open(t, dsn, 10, time.Second).Close()
				exec(t, dsn, `UPDATE layout SET version = 99`)
			} else {
				exec(t, dsn, tc.setup)
			}
			_, err := Open(context.Background(), dsn, 10, time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want an error containing %q", err, tc.want)
			}
			if _, err := ReadState(context.Background(), dsn); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadState = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// Ensure ReadState refuses a journal that is not exactly 1..counter.
func TestReadStateRefusesInconsistentJournal(t *testing.T) {
	for _, tc := range []struct {
		name, tamper, want string
	}{
		{"gap", `DELETE FROM effects WHERE value = 1`, "value 2 where 1 was expected"},
		{"counter ahead", `UPDATE state SET counter = 5`, "3 effects recorded, but the counter holds 5"},
		{"counter behind", `UPDATE state SET counter = 2`, "3 effects recorded, but the counter holds 2"},
		{"bad hash", `UPDATE effects SET body_sha256 = 'nope' WHERE value = 3`, "value 3: body_sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := newDB(t)
			s := open(t, dsn, 10, time.Second)
			for _, k := range []string{"a", "b", ""} {
				if _, err := s.Apply(intent(k, "x"), noHook); err != nil {
					t.Fatal(err)
				}
			}
			if st := state(t, dsn); st.Counter != 3 || len(st.Effects) != 3 {
				t.Fatalf("state before tampering = %+v, want 3 effects", st)
			}
			exec(t, dsn, tc.tamper)
			if _, err := ReadState(context.Background(), dsn); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadState = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// Ensure ReadState of a database no store opened is zero.
func TestReadStateEmpty(t *testing.T) {
	if st := state(t, newDB(t)); st.Counter != 0 || len(st.Effects) != 0 {
		t.Fatalf("ReadState of an empty database = %+v, want zero", st)
	}
}

// Ensure a database that cannot be reached is an error naming the DSN with
// its password hidden (no PostgreSQL needed).
func TestOpenUnreachableRedactsPassword(t *testing.T) {
	dir := t.TempDir()
	for _, dsn := range []string{
		"postgres://lab:s3cret@/idem?host=" + dir + "&connect_timeout=2",
		"host=" + dir + " user=lab password=s3cret dbname=idem connect_timeout=2",
	} {
		_, err := Open(context.Background(), dsn, 10, time.Second)
		if err == nil {
			t.Fatalf("Open(%q) = nil error", dsn)
		}
		msg := err.Error()
		if strings.Contains(msg, "s3cret") || !strings.Contains(msg, redact.DSN(dsn)) || !strings.Contains(redact.DSN(dsn), "xxxxx") {
			t.Fatalf("Open error = %q, want it to name %q and not the password", msg, redact.DSN(dsn))
		}
		if _, err := ReadState(context.Background(), dsn); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("ReadState error = %v, want one without the password", err)
		}
	}
}

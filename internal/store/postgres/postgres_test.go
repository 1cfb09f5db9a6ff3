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
	conn := pgclustertest.Connect(t, dsn)
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

// wantCounter fails t unless dsn's counter is want; when says at what point.
func wantCounter(t *testing.T, dsn string, want int64, when string) {
	t.Helper()
	if got := state(t, dsn).Counter; got != want {
		t.Fatalf("counter%s = %d, want %d", when, got, want)
	}
}

// applyOnce fails t unless a retry of key on s applies it, to value, and a
// second one replays it.
func applyOnce(t *testing.T, s *Store, key string, value int64) {
	t.Helper()
	for _, want := range []store.Result{{Value: value}, {Value: value, Replayed: true}} {
		if got, err := s.Apply(intent(key, "x"), noHook); err != nil || got != want {
			t.Fatalf("retry of %q = %+v, %v; want %+v", key, got, err, want)
		}
	}
}

// applyStep is an intent, what its afterEffect returns, and the answer it
// should get.
type applyStep struct {
	name    string
	in      store.Intent
	hookErr error
	want    store.Result
	wantErr error
	hooked  bool // afterEffect called
}

// check fails t unless an answer is the step's.
func (st applyStep) check(t *testing.T, got store.Result, err error, hooked bool) {
	t.Helper()
	if !errors.Is(err, st.wantErr) || got != st.want {
		t.Fatalf("%s: Apply = %+v, %v; want %+v, %v", st.name, got, err, st.want, st.wantErr)
	}
	if hooked != st.hooked {
		t.Fatalf("%s: afterEffect called = %v, want %v", st.name, hooked, st.hooked)
	}
}

// Ensure each intent gets the contract's answer, in order, on one store
// holding at most two keys.
func TestApplyContract(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	s := open(t, dsn, 2, time.Second)
	steps := []applyStep{
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
	for _, step := range steps {
		hooked := false
		got, err := s.Apply(step.in, func() error { hooked = true; return step.hookErr })
		step.check(t, got, err, hooked)
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
	t.Parallel()
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
	applyOnce(t, s, "k", 1)
}

// Ensure two replicas (two stores on one database) racing one key from many
// goroutines apply it exactly once; every other intent replays its value.
func TestReplicasRaceOneKey(t *testing.T) {
	t.Parallel()
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
	wantCounter(t, dsn, 1, "")
}

// Ensure two replicas applying distinct keys concurrently keep the journal
// exactly 1..counter.
func TestReplicasDistinctKeys(t *testing.T) {
	t.Parallel()
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
	wantCounter(t, dsn, 40, "")
}

// owner runs Apply on s for key with an afterEffect that reports it was
// reached and then blocks until release is closed, returning hookErr.
type owner struct {
	release chan struct{}
	done    chan struct{}
	res     store.Result
	err     error
}

// startOwner starts an owner of key on s and returns once it is inside
// its afterEffect.
func startOwner(s *Store, key string, hookErr error) *owner {
	inHook := make(chan struct{})
	o := &owner{release: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		o.res, o.err = s.Apply(intent(key, "x"), func() error {
			close(inHook)
			<-o.release
			return hookErr
		})
	}()
	<-inHook
	return o
}

// finish lets the owner's afterEffect return and waits for its Apply.
func (o *owner) finish() {
	close(o.release)
	<-o.done
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

// waitBehind starts, on a fresh database, an owner of key k on one replica
// held inside its afterEffect (which then returns hookErr), and a waiter
// for k on another replica, and returns once the waiter waits for the
// owner's lock, with the PIDs of the backends blocking it.
func waitBehind(t *testing.T, hookErr error) (dsn string, o, w *owner, blockers []int32) {
	dsn = newDB(t)
	a, b := open(t, dsn, 10, time.Second), open(t, dsn, 10, 30*time.Second)
	o = startOwner(a, "k", hookErr)
	w = startWaiter(b, "k")
	return dsn, o, w, awaitLockWait(t, dsn)
}

// Ensure a duplicate on another replica waits for the owner held inside
// afterEffect, gives ErrInProgress after its wait, and leaves the owner to
// finish; afterwards it replays.
func TestWaiterTimesOut(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	a, b := open(t, dsn, 10, time.Second), open(t, dsn, 10, 200*time.Millisecond)
	o := startOwner(a, "k", nil)
	began := time.Now()
	if _, err := b.Apply(intent("k", "x"), noHook); !errors.Is(err, store.ErrInProgress) {
		t.Fatalf("duplicate while the owner is in flight = %v, want ErrInProgress", err)
	}
	if waited := time.Since(began); waited < 150*time.Millisecond {
		t.Fatalf("duplicate gave up after %v, want about its wait of 200ms", waited)
	}
	o.finish()
	if o.err != nil || o.res != (store.Result{Value: 1}) {
		t.Fatalf("owner = %+v, %v; want value 1", o.res, o.err)
	}
	if got, err := b.Apply(intent("k", "x"), noHook); err != nil || got != (store.Result{Value: 1, Replayed: true}) {
		t.Fatalf("duplicate after the owner = %+v, %v; want a replay of 1", got, err)
	}
}

// Ensure a duplicate that waits long enough for the owner shares its
// result, and that an owner whose afterEffect fails (its transaction
// aborts) hands the key to the waiting duplicate, which applies the effect
// once.
func TestWaiterAfterOwner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		hookErr       error
		owner, waiter store.Result
	}{
		{"owner commits: the waiter replays its result", nil, store.Result{Value: 1}, store.Result{Value: 1, Replayed: true}},
		{"owner aborts: the waiter applies", errHook, store.Result{}, store.Result{Value: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, o, w, _ := waitBehind(t, tc.hookErr)
			o.finish()
			<-w.done
			if !errors.Is(o.err, tc.hookErr) || o.res != tc.owner {
				t.Fatalf("owner = %+v, %v; want %+v, %v", o.res, o.err, tc.owner, tc.hookErr)
			}
			if w.err != nil || w.res != tc.waiter {
				t.Fatalf("waiter = %+v, %v; want %+v", w.res, w.err, tc.waiter)
			}
			wantCounter(t, dsn, 1, "")
		})
	}
}

// awaitLockWait waits until a session of dsn's database waits for a lock,
// and returns the PIDs of the backends blocking it.
func awaitLockWait(t *testing.T, dsn string) []int32 {
	t.Helper()
	conn := pgclustertest.Connect(t, dsn)
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

// Ensure an owner whose connection dies inside afterEffect (as when its
// process crashes: pg_terminate_backend from a third session) hands the key
// to the waiting duplicate, which applies once; the owner gets
// ErrUnavailable.
func TestWaiterTakesOverTerminatedOwner(t *testing.T) {
	t.Parallel()
	dsn, o, w, blockers := waitBehind(t, nil)
	exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, blockers)
	<-w.done
	if w.err != nil || w.res != (store.Result{Value: 1}) {
		t.Fatalf("waiter = %+v, %v; want it to apply: value 1", w.res, w.err)
	}
	o.finish()
	if !errors.Is(o.err, store.ErrUnavailable) {
		t.Fatalf("owner whose connection died = %+v, %v; want ErrUnavailable", o.res, o.err)
	}
	wantCounter(t, dsn, 1, "")
}

// Ensure a connection lost during Apply is ErrUnavailable, records
// nothing, and a retry applies exactly once.
func TestConnectionLostIsUnavailable(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	s := open(t, dsn, 10, time.Second)
	o := startOwner(s, "k", nil)
	exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction'`)
	o.finish()
	if !errors.Is(o.err, store.ErrUnavailable) {
		t.Fatalf("Apply whose connection died = %+v, %v; want ErrUnavailable", o.res, o.err)
	}
	wantCounter(t, dsn, 0, " after the lost connection")
	applyOnce(t, s, "k", 1)
}

// Ensure a store whose server is gone answers ErrUnavailable.
func TestServerGoneIsUnavailable(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	if st := state(t, newDB(t)); st.Counter != 0 || len(st.Effects) != 0 {
		t.Fatalf("ReadState of an empty database = %+v, want zero", st)
	}
}

// Ensure a database that cannot be reached is an error naming the DSN with
// its password hidden (no PostgreSQL needed).
func TestOpenUnreachableRedactsPassword(t *testing.T) {
	t.Parallel()
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

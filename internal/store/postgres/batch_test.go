package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/store"
	"idemlab/internal/store/internal/groupcommit"
)

// call is one intent of a test batch and its callback (nil: none).
type call struct {
	in   store.Intent
	hook func() error
}

// answer is what a call got, and whether it was run alone after its batch.
type answer struct {
	res   store.Result
	err   error
	alone bool
}

// runCalls runs calls in one transaction of s, as the committer runs a
// batch, and then those it hands back alone, as Apply does; it returns
// their answers in order.
func runCalls(s *Store, calls ...call) []answer {
	qs := make([]*queued, len(calls))
	for i, c := range calls {
		hook := c.hook
		if hook == nil {
			hook = noHook
		}
		qs[i] = groupcommit.NewCall[*pending, outcome](&pending{in: c.in, afterEffect: hook})
	}
	s.runBatch(qs)
	out := make([]answer, len(qs))
	for i, q := range qs {
		o := q.Wait()
		out[i] = answer{res: o.res, err: o.err, alone: o.alone}
		if o.alone {
			o = s.applyAlone(q.Arg)
			out[i].res, out[i].err = o.res, o.err
		}
	}
	return out
}

// Ensure each intent of one transaction gets the answer it would have got
// alone, whatever the others' outcomes: new keys, a replay, a conflict, an
// unkeyed intent, a failing callback (its effect and claim gone, the
// others' values contiguous) and a full store, where the failed intent's
// place goes to an intent first refused.
func TestBatchAnswersEachIntentAsAlone(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	s := open(t, dsn, 4, time.Second)
	for _, k := range []string{"r", "c"} { // values 1 and 2
		if _, err := s.Apply(intent(k, "x"), noHook); err != nil {
			t.Fatal(err)
		}
	}
	hooked := map[string]bool{}
	hook := func(name string, err error) func() error {
		return func() error { hooked[name] = true; return err }
	}
	steps := []struct {
		applyStep
		alone bool // run alone after the batch
	}{
		{applyStep{"new key", intent("a", "x"), nil, store.Result{Value: 3}, nil, true}, false},
		{applyStep{"replay", intent("r", "x"), nil, store.Result{Value: 1, Replayed: true}, nil, false}, false},
		{applyStep{"conflict", intent("c", "y"), nil, store.Result{}, store.ErrConflict, false}, false},
		{applyStep{"unkeyed", intent("", "x"), nil, store.Result{Value: 4}, nil, true}, false},
		{applyStep{"callback fails", intent("f", "x"), errHook, store.Result{}, errHook, true}, false},
		{applyStep{"refused, then the failed one's place", intent("b", "x"), nil, store.Result{Value: 5}, nil, true}, true},
		{applyStep{"full", intent("g", "x"), nil, store.Result{}, store.ErrFull, false}, true},
	}
	calls := make([]call, len(steps))
	for i, st := range steps {
		calls[i] = call{st.in, hook(st.name, st.hookErr)}
	}
	got := runCalls(s, calls...)
	for i, st := range steps {
		st.check(t, got[i].res, got[i].err, hooked[st.name])
		if got[i].alone != st.alone {
			t.Errorf("%s: alone = %v, want %v", st.name, got[i].alone, st.alone)
		}
	}
	if st := state(t, dsn); st.Counter != 5 || len(st.Effects) != 5 {
		t.Fatalf("state = %+v, want the counter and journal at 5", st)
	}
	recs, err := s.Recorded()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range recs {
		keys = append(keys, fmt.Sprint(r.Key, "=", r.Value))
	}
	if got, want := fmt.Sprint(keys), "[r=1 c=2 a=3 b=5]"; got != want {
		t.Fatalf("Recorded = %s, want %s", got, want)
	}
	if got := s.Stats(); got.Commits != 4 || got.Intents != 5 {
		t.Fatalf("Stats = %+v, want 4 commits of 5 effects (2 alone, the batch's 2, b alone)", got)
	}
}

var errCut = errors.New("stall cut at shutdown")

// Ensure a callback that stalls and then fails (the server cutting a
// stalled request at shutdown) holds its transaction with nothing of it
// visible, then rolls back its own intent only: the others of its batch
// commit, its key stays free, and a retry applies it once.
func TestBatchCallbackErrorAfterStall(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	s := open(t, dsn, 10, time.Second)
	stalled, release := make(chan struct{}), make(chan struct{})
	stall := func() error {
		close(stalled)
		<-release
		return errCut
	}
	done := make(chan []answer)
	go func() {
		done <- runCalls(s, call{intent("a", "x"), nil}, call{intent("cut", "x"), stall}, call{intent("", "x"), nil})
	}()
	<-stalled
	wantCounter(t, dsn, 0, " seen while a callback stalls (nothing committed)")
	close(release)
	got := <-done
	if got[0].err != nil || got[0].res != (store.Result{Value: 1}) || got[2].err != nil || got[2].res != (store.Result{Value: 2}) {
		t.Fatalf("the batch's other intents = %+v, %+v; want values 1 and 2", got[0], got[2])
	}
	if !errors.Is(got[1].err, errCut) {
		t.Fatalf("the cut intent = %+v, %v; want %v", got[1].res, got[1].err, errCut)
	}
	wantCounter(t, dsn, 2, "")
	applyOnce(t, s, "cut", 3)
}

// Ensure a connection lost inside a batch (as when the process dies, or
// its database session is terminated) takes every uncommitted intent of
// the batch with it: each is ErrUnavailable, nothing is recorded, and each
// retry applies once.
func TestBatchLostConnectionTakesTheBatch(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	s := open(t, dsn, 10, time.Second)
	kill := func() error {
		exec(t, dsn, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle in transaction'`)
		return nil
	}
	got := runCalls(s, call{intent("a", "x"), nil}, call{intent("b", "x"), kill}, call{intent("", "x"), nil})
	for i, g := range got {
		if !errors.Is(g.err, store.ErrUnavailable) {
			t.Fatalf("intent %d = %+v, %v; want ErrUnavailable", i, g.res, g.err)
		}
	}
	wantCounter(t, dsn, 0, " after the lost connection")
	applyOnce(t, s, "a", 1)
	applyOnce(t, s, "b", 2)
}

// Ensure intents that wait while the committer is busy share its next
// transaction and commit: one commit for all of them.
func TestCommitterSharesOneCommit(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	s := open(t, dsn, 100, time.Second)
	first := startOwner(s, "first", nil)
	const waiting = 8
	results := make([]store.Result, waiting)
	errs := make([]error, waiting)
	var wg sync.WaitGroup
	for i := range waiting {
		wg.Go(func() { results[i], errs[i] = s.Apply(intent(fmt.Sprint("k", i), "x"), noHook) })
	}
	for deadline := time.Now().Add(30 * time.Second); s.committer.Queued() < waiting; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d intents queued within 30s, want %d", s.committer.Queued(), waiting)
		}
	}
	first.finish()
	wg.Wait()
	if err := errors.Join(append(errs, first.err)...); err != nil {
		t.Fatal(err)
	}
	var values []int64
	for _, r := range results {
		values = append(values, r.Value)
	}
	slices.Sort(values)
	if got, want := fmt.Sprint(values), "[2 3 4 5 6 7 8 9]"; got != want {
		t.Fatalf("values = %s, want %s", got, want)
	}
	if got := s.Stats(); got.Commits != 2 || got.Intents != waiting+1 {
		t.Fatalf("Stats = %+v, want 2 commits: the first intent's, then all %d waiting ones'", got, waiting)
	}
}

// Ensure two replicas whose batches race for the same fresh keys, each
// replica's goroutines taking them in their own order, never deadlock
// (no SQLSTATE 40P01 seen by either store, none counted by PostgreSQL)
// and apply each key exactly once, every other intent replaying its value.
func TestReplicasHotKeysNoDeadlock(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	replicas := []*Store{open(t, dsn, 1<<20, 30*time.Second), open(t, dsn, 1<<20, 30*time.Second)}
	const rounds, keysPerRound, perReplica = 4, 64, 32
	type result struct {
		key string
		res store.Result
		err error
	}
	var all []result
	for round := range rounds {
		keys := make([]string, keysPerRound)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%d-k%d", round, i)
		}
		results := make([][]result, 2*perReplica)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range results {
			wg.Go(func() {
				<-start
				order := slices.Clone(keys)
				rand.New(rand.NewPCG(uint64(round), uint64(g))).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				for _, k := range order {
					res, err := replicas[g%2].Apply(intent(k, "x"), noHook)
					results[g] = append(results[g], result{k, res, err})
				}
			})
		}
		close(start)
		wg.Wait()
		all = slices.Concat(append([][]result{all}, results...)...)
	}
	applied := map[string]int{}
	value := map[string]int64{}
	for _, r := range all {
		if r.err != nil {
			t.Fatalf("Apply(%s): %v", r.key, r.err)
		}
		if v, ok := value[r.key]; ok && v != r.res.Value {
			t.Fatalf("key %s answered %d and %d", r.key, v, r.res.Value)
		}
		value[r.key] = r.res.Value
		if !r.res.Replayed {
			applied[r.key]++
		}
	}
	for k := range value {
		if applied[k] != 1 {
			t.Errorf("key %s applied %d times, want 1", k, applied[k])
		}
	}
	wantCounter(t, dsn, rounds*keysPerRound, " (one effect per key)")
	for i, s := range replicas {
		if st := s.Stats(); st.Deadlocks != 0 || st.Retries != 0 {
			t.Errorf("replica %d: Stats = %+v, want no deadlock and no retry", i, st)
		}
		s.Close()
	}
	if n := serverDeadlocks(t, dsn); n != 0 {
		t.Fatalf("PostgreSQL counted %d deadlocks in the database, want 0", n)
	}
}

// serverDeadlocks returns PostgreSQL's count of deadlocks in dsn's
// database, once every other session of it has ended (a backend reports
// its counts when it exits).
func serverDeadlocks(t *testing.T, dsn string) int64 {
	t.Helper()
	ctx := context.Background()
	conn := pgclustertest.Connect(t, dsn)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var others int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			t.Fatal(err)
		}
		if others == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d other sessions still open after 30s", others)
		}
	}
	var n int64
	if err := conn.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Ensure a batch that PostgreSQL aborts as a deadlock victim is run again,
// not answered with an error: a foreign session holding the state row and
// then waiting for the batch's claim makes the cycle, and the intent still
// applies once.
func TestDeadlockVictimIsRetried(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	// The store's sessions find the cycle (after 2s); the foreign one,
	// waiting second, would look only after a minute.
	exec(t, dsn, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET deadlock_timeout = %L', current_database(), '2s'); END $$`)
	s := open(t, dsn, 10, 30*time.Second)
	ctx := context.Background()
	x := pgclustertest.Connect(t, dsn)
	for _, q := range []string{`SET deadlock_timeout = '1min'`, `BEGIN`, `SELECT 1 FROM state WHERE id = 1 FOR UPDATE`} {
		if _, err := x.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	w := startWaiter(s, "k")
	awaitLockWait(t, dsn) // the batch holds k's claim and waits for the state row
	if _, err := x.Exec(ctx, `INSERT INTO keys (key, fingerprint) VALUES ('k', '\x00') ON CONFLICT DO NOTHING`); err != nil {
		t.Fatalf("the foreign session's claim: %v (want the store's transaction to be the deadlock's victim)", err)
	}
	if _, err := x.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	<-w.done
	if w.err != nil || w.res != (store.Result{Value: 1}) {
		t.Fatalf("Apply = %+v, %v; want value 1 after the retry", w.res, w.err)
	}
	// The retry may claim k again before the foreign session's insert
	// does, and make the same cycle once more: at least one deadlock,
	// each one retried.
	if got := s.Stats(); got.Deadlocks < 1 || got.Retries != got.Deadlocks {
		t.Fatalf("Stats = %+v, want a deadlock or more, each retried", got)
	}
	wantCounter(t, dsn, 1, "")
}

// Ensure a batch keeps the first intent of each key and leaves the later
// ones, in order, for the next batch.
func TestSplitDuplicates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		keys         []string
		first, later string
	}{
		{[]string{"a", "b", "c"}, "[a b c]", "[]"},
		{[]string{"a", "a", "b", "a"}, "[a b]", "[a a]"},
		{[]string{"", "", "a"}, "[  a]", "[]"},
	} {
		batch := make([]*queued, len(tc.keys))
		for i, k := range tc.keys {
			batch[i] = groupcommit.NewCall[*pending, outcome](&pending{in: intent(k, "x")})
		}
		first, later := splitDuplicates(batch)
		keys := func(qs []*queued) string {
			var ks []string
			for _, q := range qs {
				ks = append(ks, q.Arg.in.Key)
			}
			return fmt.Sprint(ks)
		}
		if keys(first) != tc.first || keys(later) != tc.later {
			t.Errorf("splitDuplicates(%q) = %s, %s; want %s, %s", tc.keys, keys(first), keys(later), tc.first, tc.later)
		}
	}
}

// Ensure an afterEffect that panics on the committer panics in Apply's
// caller instead, with its intent rolled back, and the store serves on.
func TestAfterEffectPanicReachesTheCaller(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	s := open(t, dsn, 10, time.Second)
	panicked := func() (r any) {
		defer func() { r = recover() }()
		s.Apply(intent("p", "x"), func() error { panic("boom") })
		return nil
	}()
	if panicked != "boom" {
		t.Fatalf("Apply with a panicking afterEffect panicked with %v, want boom", panicked)
	}
	wantCounter(t, dsn, 0, " after the panic")
	if got, err := s.Apply(intent("p", "x"), noHook); err != nil || got != (store.Result{Value: 1}) {
		t.Fatalf("retry after the panic = %+v, %v; want value 1", got, err)
	}
}

// Ensure a key the database refuses (here one holding a NUL byte, which
// text cannot) fails its own intent only: the batch's claims are run again
// one key at a time, and the other intents apply.
func TestBatchRefusedKeyFailsAlone(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	s := open(t, dsn, 10, time.Second)
	got := runCalls(s, call{intent("a", "x"), nil}, call{intent("b\x00", "x"), nil}, call{intent("c", "x"), nil})
	if got[0].err != nil || got[0].res != (store.Result{Value: 1}) || got[2].err != nil || got[2].res != (store.Result{Value: 2}) {
		t.Fatalf("the other intents = %+v, %+v; want values 1 and 2", got[0], got[2])
	}
	if got[1].err == nil || errors.Is(got[1].err, store.ErrUnavailable) {
		t.Fatalf("the refused key = %+v, %v; want the database's error", got[1].res, got[1].err)
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](got[1].err); !ok || pgErr.Code != "22021" {
		t.Fatalf("the refused key's error = %v, want SQLSTATE 22021 (invalid byte sequence)", got[1].err)
	}
	wantCounter(t, dsn, 2, "")
}

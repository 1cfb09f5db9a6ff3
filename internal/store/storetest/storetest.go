// Package storetest is the contract test every store.Phased passes, run
// against a clock the test moves, and SQLite helpers for tests that read
// or tamper with a durable store's database.
package storetest

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"idemlab/internal/store"
)

// SQLite opens the SQLite database dsn names (its path, then any
// options), closed when t ends.
func SQLite(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// SQLiteExec runs stmts on the SQLite database dsn names, creating it if
// need be, and closes it.
func SQLiteExec(t testing.TB, dsn, stmts string) {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmts); err != nil {
		t.Fatalf("%s: %v", dsn, err)
	}
}

// A Keeper is a store.Phased whose key TTL and clock a test sets.
type Keeper interface {
	store.Phased
	SetKeyTTL(d time.Duration)
	SetClockForTest(now func() time.Time)
}

// Lease is the lease every Claim of the contract asks for.
const Lease = time.Second

// step is one call of the contract and its answer.
type step struct {
	name    string
	advance time.Duration // move the clock first
	op      string        // "claim", "complete", "release"
	key     string
	body    string
	token   int   // complete/release: the token of the n-th Owned claim (from 1), 0: a made-up one
	value   int64 // complete
	want    store.ClaimState
	over    bool  // want TakenOver
	val     int64 // want Value (Recorded)
	err     error
}

// Run runs the contract on fresh stores: open returns an empty one of the
// given capacity.
func Run[S Keeper](t *testing.T, open func(t *testing.T, capacity int) S) {
	t.Run("claim-complete-takeover", func(t *testing.T) {
		run(t, open, 2, 0, []step{
			{name: "a new key is owned", op: "claim", key: "a", body: "x", want: store.Owned},
			{name: "a duplicate within the lease is busy", op: "claim", key: "a", body: "x", want: store.Busy},
			{name: "another body is a conflict", op: "claim", key: "a", body: "y", err: store.ErrConflict},
			{name: "after the lease it is taken over", advance: Lease, op: "claim", key: "a", body: "x", want: store.Owned, over: true},
			{name: "the first owner's token no longer holds", op: "complete", key: "a", token: 1, value: 5, err: store.ErrClaimLost},
			{name: "the new owner completes", op: "complete", key: "a", token: 2, value: 7},
			{name: "a completed key replays", op: "claim", key: "a", body: "x", want: store.Recorded, val: 7},
			{name: "completing twice is refused", op: "complete", key: "a", token: 2, value: 8, err: store.ErrClaimLost},
			{name: "a recorded key with another body is a conflict", op: "claim", key: "a", body: "y", err: store.ErrConflict},
			{name: "a second key fills capacity", op: "claim", key: "b", body: "x", want: store.Owned},
			{name: "a third key is refused", op: "claim", key: "c", body: "x", err: store.ErrFull},
			{name: "an expired claim still takes its place", advance: 10 * Lease, op: "claim", key: "c", body: "x", err: store.ErrFull},
			{name: "a made-up token releases nothing", op: "release", key: "b", token: 0, err: store.ErrClaimLost},
			{name: "the owner releases", op: "release", key: "b", token: 3},
			{name: "the freed place takes a new key", op: "claim", key: "c", body: "x", want: store.Owned},
			{name: "recorded keys never expire without a TTL", advance: 1000 * Lease, op: "claim", key: "a", body: "x", want: store.Recorded, val: 7},
		})
	})
	t.Run("ttl", func(t *testing.T) {
		ttl := 5 * Lease
		run(t, open, 2, ttl, []step{
			{name: "a is owned", op: "claim", key: "a", body: "x", want: store.Owned},
			{name: "a completes", op: "complete", key: "a", token: 1, value: 1},
			{name: "b is owned", op: "claim", key: "b", body: "x", want: store.Owned},
			{name: "b completes", op: "complete", key: "b", token: 2, value: 2},
			{name: "a full table refuses c", op: "claim", key: "c", body: "x", err: store.ErrFull},
			{name: "a replays just before its TTL", advance: ttl - time.Millisecond, op: "claim", key: "a", body: "x", want: store.Recorded, val: 1},
			{name: "an expired key frees its place for c", advance: time.Millisecond, op: "claim", key: "c", body: "x", want: store.Owned},
			{name: "an expired key is new again, other body or not", op: "claim", key: "b", body: "y", want: store.Owned},
			{name: "c completes", op: "complete", key: "c", token: 3, value: 3},
			{name: "b completes", op: "complete", key: "b", token: 4, value: 4},
			{name: "a, expired, finds the table full", op: "claim", key: "a", body: "x", err: store.ErrFull},
			{name: "c replays within its TTL", advance: ttl - time.Millisecond, op: "claim", key: "c", body: "x", want: store.Recorded, val: 3},
		})
	})
}

func run[S Keeper](t *testing.T, open func(t *testing.T, capacity int) S, capacity int, ttl time.Duration, steps []step) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := open(t, capacity)
	p.SetKeyTTL(ttl)
	p.SetClockForTest(func() time.Time { return now })
	var tokens []string
	for i, s := range steps {
		now = now.Add(s.advance)
		fp := store.FingerprintOf([]byte(s.body))
		tok := "0123456789abcdef0123456789abcdef"
		if s.token > 0 {
			tok = tokens[s.token-1]
		}
		var err error
		var c store.Claim
		switch s.op {
		case "claim":
			c, err = p.Claim(store.Intent{Key: s.key, Fingerprint: fp}, Lease)
		case "complete":
			err = p.Complete(s.key, tok, s.value)
		case "release":
			err = p.Release(s.key, tok)
		}
		if !errors.Is(err, s.err) {
			t.Fatalf("step %d (%s): %s %s: error %v, want %v", i, s.name, s.op, s.key, err, s.err)
		}
		if s.op != "claim" || err != nil {
			continue
		}
		if got, want := c.State, s.want; got != want {
			t.Fatalf("step %d (%s): Claim(%s).State = %d, want %d", i, s.name, s.key, got, want)
		}
		switch c.State {
		case store.Owned:
			if c.Token == "" || c.TakenOver != s.over || !c.LeaseUntil.Equal(now.Add(Lease)) {
				t.Fatalf("step %d (%s): Claim(%s) = %+v, want a token, TakenOver %v, LeaseUntil %v", i, s.name, s.key, c, s.over, now.Add(Lease))
			}
			for _, old := range tokens {
				if old == c.Token {
					t.Fatalf("step %d (%s): token %s reused", i, s.name, c.Token)
				}
			}
			tokens = append(tokens, c.Token)
		case store.Recorded:
			if c.Value != s.val {
				t.Fatalf("step %d (%s): Claim(%s).Value = %d, want %d", i, s.name, s.key, c.Value, s.val)
			}
		case store.Busy:
			if !c.LeaseUntil.After(now) {
				t.Fatalf("step %d (%s): Busy until %v, not after now %v", i, s.name, c.LeaseUntil, now)
			}
		}
	}
}

// An Applier is a persistent store: a Keeper that also applies and lists.
type Applier interface {
	Keeper
	Apply(in store.Intent, afterEffect func() error) (store.Result, error)
	RecordedWithTimes() ([]store.TimedRecord, error)
}

// ApplyTTL checks the key TTL on Apply's keys: a replay within it, a new
// effect after it, an expired key's place free, and RecordedWithTimes
// leaving expired keys out.
func ApplyTTL[S Applier](t *testing.T, open func(t *testing.T, capacity int) S) {
	const ttl = 10 * time.Second
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := open(t, 2)
	s.SetKeyTTL(ttl)
	s.SetClockForTest(func() time.Time { return now })
	steps := []struct {
		name     string
		advance  time.Duration
		key      string
		value    int64
		replayed bool
		err      error
		live     int
	}{
		{"a applies", 0, "a", 1, false, nil, 1},
		{"b applies", ttl / 2, "b", 2, false, nil, 2},
		{"c finds the store full", 0, "c", 0, false, store.ErrFull, 2},
		{"a replays just before its TTL", ttl/2 - time.Millisecond, "a", 1, true, nil, 2},
		{"a is a new effect at its TTL", time.Millisecond, "a", 3, false, nil, 2},
		{"c still finds the store full", 0, "c", 0, false, store.ErrFull, 2},
		{"b expired: c takes its place", ttl / 2, "c", 4, false, nil, 2},
	}
	noHook := func() error { return nil }
	for _, st := range steps {
		now = now.Add(st.advance)
		res, err := s.Apply(store.Intent{Key: st.key, Fingerprint: store.FingerprintOf([]byte("add-one"))}, noHook)
		if !errors.Is(err, st.err) || res.Value != st.value || res.Replayed != st.replayed {
			t.Fatalf("%s: Apply(%s) = %+v, %v; want value %d replayed %v, %v", st.name, st.key, res, err, st.value, st.replayed, st.err)
		}
		recs, err := s.RecordedWithTimes()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(recs), st.live; got != want {
			t.Fatalf("%s: RecordedWithTimes() holds %d keys, want %d", st.name, got, want)
		}
	}
}

// Takeover checks that a's claim of in outlives its owner in the store
// next returns (another replica, or a reopened): busy within the lease,
// then taken over, the first token completing nothing. It returns the
// first owner's token.
func Takeover[S Keeper](t *testing.T, in store.Intent, a S, next func() S) (first string) {
	t.Helper()
	now := time.Now()
	clock := func() time.Time { return now }
	a.SetClockForTest(clock)
	c, err := a.Claim(in, Lease)
	if err != nil || c.State != store.Owned {
		t.Fatalf("Claim = %+v, %v; want Owned", c, err)
	}
	first = c.Token
	b := next()
	b.SetClockForTest(clock)
	if c, err := b.Claim(in, Lease); err != nil || c.State != store.Busy {
		t.Fatalf("Claim on the other store within the lease = %+v, %v; want Busy", c, err)
	}
	now = now.Add(Lease)
	second, err := b.Claim(in, Lease)
	if err != nil || second.State != store.Owned || !second.TakenOver {
		t.Fatalf("Claim after the lease = %+v, %v; want Owned, taken over", second, err)
	}
	if err := b.Complete(in.Key, first, 1); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete(first owner) = %v, want ErrClaimLost", err)
	}
	if err := b.Complete(in.Key, second.Token, 2); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Claim(in, Lease); err != nil || c.State != store.Recorded || c.Value != 2 {
		t.Fatalf("Claim after Complete = %+v, %v; want Recorded 2", c, err)
	}
	return first
}

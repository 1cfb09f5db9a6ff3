package unsaferegistry

import (
	"context"
	"sync"
	"testing"

	"time"

	"idemlab/internal/effectserver/registry"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// Ensure each mutant does exactly its classic damage, and the sound registry
// does not: the same script runs against both, and the outcome of its last
// Acquire tells them apart.
func TestFlaws(t *testing.T) {
	ctx := context.Background()
	a, b := store.FingerprintOf([]byte("a")), store.FingerprintOf([]byte("b"))
	const wait = 50 * time.Millisecond
	tests := []struct {
		flaw protocol.Flaw
		// script runs against r and reports whether the last request became
		// an owner (the effect would run again).
		script     func(t *testing.T, r registry.Table) (owner bool, err error)
		soundOwner bool
		soundErr   error
		flawOwner  bool // no-fingerprint replays (not an owner) where sound says 422
	}{
		{protocol.FlawRecordAfterEffect, func(t *testing.T, r registry.Table) (bool, error) {
			if _, _, err := r.Acquire(ctx, "k", a, wait); err != nil { // in flight, never completed
				t.Fatal(err)
			}
			t2, _, err := r.Acquire(ctx, "k", a, wait)
			return t2 != nil, err
		}, false, store.ErrInProgress, true},
		{protocol.FlawNoFingerprint, func(t *testing.T, r registry.Table) (bool, error) {
			t1, _, err := r.Acquire(ctx, "k", a, wait)
			if err != nil {
				t.Fatal(err)
			}
			t1.Complete(1)
			t2, _, err := r.Acquire(ctx, "k", b, wait)
			return t2 != nil, err
		}, false, store.ErrConflict, false},
		{protocol.FlawEvictOldest, func(t *testing.T, r registry.Table) (bool, error) {
			for _, k := range []string{"k0", "k1"} {
				tk, _, err := r.Acquire(ctx, k, a, wait)
				if err != nil {
					t.Fatal(err)
				}
				tk.Complete(1)
			}
			if tk, _, err := r.Acquire(ctx, "overflow", a, wait); err == nil {
				tk.Complete(3)
			}
			t2, _, err := r.Acquire(ctx, "k0", a, wait)
			return t2 != nil, err
		}, false, nil, true},
		{protocol.FlawForgetOnLostReply, func(t *testing.T, r registry.Table) (bool, error) {
			t1, _, err := r.Acquire(ctx, "k", a, wait)
			if err != nil {
				t.Fatal(err)
			}
			t1.Complete(1)
			t1.ReplyLost()
			t2, _, err := r.Acquire(ctx, "k", a, wait)
			return t2 != nil, err
		}, false, nil, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.flaw), func(t *testing.T) {
			owner, err := tt.script(t, mustNew(t, protocol.Sound, 2))
			if owner != tt.soundOwner || err != tt.soundErr {
				t.Fatalf("sound registry: owner %v, err %v; want owner %v, err %v", owner, err, tt.soundOwner, tt.soundErr)
			}
			owner, err = tt.script(t, mustNew(t, tt.flaw, 2))
			if owner != tt.flawOwner || err != nil {
				t.Fatalf("%s: owner %v, err %v; want owner %v and no error (the flaw)", tt.flaw, owner, err, tt.flawOwner)
			}
		})
	}
}

func mustNew(t *testing.T, flaw protocol.Flaw, capacity int) registry.Table {
	t.Helper()
	r, err := New(flaw, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Ensure every flaw the protocol names is built, and an unknown one refused.
func TestNewEveryFlaw(t *testing.T) {
	for _, f := range protocol.Flaws {
		if _, err := New(f, 1); err != nil {
			t.Errorf("New(%s) = %v", f, err)
		}
	}
	if _, err := New("evict-newest", 1); err == nil {
		t.Error("New(evict-newest) succeeded")
	}
}

// Ensure record-before-effect is the phantom success: while the owner's
// effect runs, a duplicate replays the placeholder instead of waiting, and
// after the effect failed the placeholder still replays; the sound
// registry makes the duplicate wait and lets a retry own the key again.
// Once the effect completes, both replay its real result.
func TestRecordBeforeEffect(t *testing.T) {
	ctx := context.Background()
	a := store.FingerprintOf([]byte("a"))
	const wait = 20 * time.Millisecond
	for _, tt := range []struct {
		flaw          protocol.Flaw
		inFlightErr   error // a duplicate while the owner runs
		afterRelease  bool  // a retry after the effect failed is an owner
		replayedValue int64 // what the duplicate and the retry replay
	}{
		{protocol.Sound, store.ErrInProgress, true, 0},
		{protocol.FlawRecordBeforeEffect, nil, false, phantomValue},
	} {
		r := mustNew(t, tt.flaw, 2)
		owner, _, err := r.Acquire(ctx, "k", a, wait)
		if owner == nil || err != nil {
			t.Fatalf("%q: first Acquire = %v, %v, want an owner", tt.flaw, owner, err)
		}
		dup, v, err := r.Acquire(ctx, "k", a, wait)
		if dup != nil || err != tt.inFlightErr || v != tt.replayedValue {
			t.Errorf("%q: duplicate in flight = %v, %d, %v; want no owner, %d, %v", tt.flaw, dup, v, err, tt.replayedValue, tt.inFlightErr)
		}
		owner.Release() // the effect failed
		retry, v, err := r.Acquire(ctx, "k", a, wait)
		if got := retry != nil; got != tt.afterRelease || err != nil {
			t.Fatalf("%q: retry after a failed effect: owner %v (value %d), err %v; want owner %v, no error", tt.flaw, got, v, err, tt.afterRelease)
		}
		if retry == nil {
			if v != phantomValue {
				t.Errorf("%q: retry after a failed effect replayed %d, want the placeholder %d", tt.flaw, v, phantomValue)
			}
			continue
		}
		retry.Complete(7)
		if tk, v, err := r.Acquire(ctx, "k", a, wait); tk != nil || err != nil || v != 7 {
			t.Errorf("%q: after Complete(7) = %v, %d, %v, want a replay of 7", tt.flaw, tk, v, err)
		}
	}
	// The flaw fills in the real result once the effect is done.
	r := mustNew(t, protocol.FlawRecordBeforeEffect, 2)
	owner, _, _ := r.Acquire(ctx, "k", a, wait)
	owner.Complete(7)
	if tk, v, err := r.Acquire(ctx, "k", a, wait); tk != nil || err != nil || v != 7 {
		t.Errorf("record-before-effect after Complete(7) = %v, %d, %v, want a replay of 7", tk, v, err)
	}
}

// Ensure check-then-act lets two duplicates that both pass the check
// before either inserts become owners (the gap is a barrier here, so the
// interleaving is forced, not hoped for), and that a duplicate arriving
// after the insert still waits for the owner and replays its result.
func TestCheckThenAct(t *testing.T) {
	ctx := context.Background()
	a := store.FingerprintOf([]byte("a"))
	var checked sync.WaitGroup
	checked.Add(2)
	m := &checkThenAct{Registry: registry.New(4), gap: func(string) { checked.Done(); checked.Wait() }}
	owners := make([]registry.Ticket, 2)
	var wg sync.WaitGroup
	for i := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owners[i], _, _ = m.Acquire(ctx, "k", a, time.Second)
		}()
	}
	wg.Wait()
	if owners[0] == nil || owners[1] == nil {
		t.Fatalf("two duplicates through the gap: owners %v, %v; want both owners (the flaw)", owners[0], owners[1])
	}
	for _, o := range owners {
		o.Complete(1)
	}

	m = &checkThenAct{Registry: registry.New(4), gap: func(string) {}}
	owner, _, err := m.Acquire(ctx, "j", a, time.Second)
	if owner == nil || err != nil {
		t.Fatalf("first Acquire = %v, %v, want an owner", owner, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if tk, v, err := m.Acquire(ctx, "j", a, time.Second); tk != nil || err != nil || v != 5 {
			t.Errorf("duplicate after the insert = %v, %d, %v, want a replay of 5", tk, v, err)
		}
	}()
	time.Sleep(10 * time.Millisecond) // let the duplicate start waiting; a late one replays too
	owner.Complete(5)
	<-done
}

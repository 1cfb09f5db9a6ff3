package mutant

import (
	"context"
	"testing"

	"idemlab/internal/protocol"
	"idemlab/internal/registry"
	"idemlab/internal/store"
	"time"
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

// Package registry is the in-process table of idempotency keys: it decides,
// atomically, whether a keyed request owns its key, replays a recorded
// result, waits for an owner still in flight, or is refused.
//
// Lookup and record creation happen under one lock (the claim); the owner
// runs the effect outside the lock and then completes the record with its
// result, or releases it when the effect failed so that a later request can
// run. Duplicates that arrive while the owner is in flight wait for it,
// bounded, and share its result. The table holds at most a fixed number of
// keys, in-flight ones included, and never evicts.
//
// The volatile store keeps results only here; a durable store also loads the
// results it kept into a Registry with Restore, so the claim and wait logic
// is the same for both.
package registry

import (
	"context"
	"errors"
	"sync"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// ErrExists is returned by Restore for a key already held.
var ErrExists = errors.New("key already recorded")

// A Registry is a bounded table of keys. Its methods are safe for concurrent use.
type Registry struct {
	capacity int
	flaw     protocol.Flaw // protocol.Sound except in the lab's mutation runs (NewUnsafe)

	mu      sync.Mutex
	records map[string]*record
	nextSeq uint64 // insertion order, for EvictOldest

	// onWait, when set by a test, is called (outside the lock) each time a
	// request starts waiting for an owner. Guarded by mu.
	onWait func(key string)
}

// A record is one key: in flight until done is closed, then either final
// (value recorded) or removed from the table (released).
type record struct {
	fp    store.Fingerprint
	done  chan struct{}
	final bool
	value int64
	seq   uint64 // when the key was inserted
}

// New returns an empty Registry holding at most capacity keys.
func New(capacity int) *Registry {
	return &Registry{capacity: capacity, records: make(map[string]*record)}
}

// Len returns the number of keys held, in flight or recorded.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.records)
}

// Restore records value as the final result of key, as a durable store
// does at start for the results it kept. It fails if key is already held or
// the registry is full.
func (r *Registry) Restore(key string, fp store.Fingerprint, value int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.records[key]; ok {
		return ErrExists
	}
	if len(r.records) >= r.capacity {
		return store.ErrFull
	}
	done := make(chan struct{})
	close(done)
	r.nextSeq++
	r.records[key] = &record{fp: fp, done: done, final: true, value: value, seq: r.nextSeq}
	return nil
}

// Acquire claims key for a request whose content has fingerprint fp.
// It returns one of:
//
//   - an owner Ticket (t != nil): the caller runs the effect, then calls
//     t.Complete with the result or t.Release if the effect failed;
//   - a recorded result (t == nil, err == nil): the caller replays value;
//   - store.ErrConflict: key is held (in flight or recorded) for another fingerprint;
//   - store.ErrFull: key is new and the registry is at capacity;
//   - store.ErrInProgress: an owner stayed in flight longer than wait;
//   - ctx.Err(): the caller gave up while waiting.
//
// A waiter whose owner releases the key tries to claim it again, within the
// same wait budget. Waiting never removes the record or runs the effect.
func (r *Registry) Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (t *Ticket, value int64, err error) {
	var timeout <-chan time.Time
	for {
		r.mu.Lock()
		rec, ok := r.records[key]
		switch {
		case !ok:
			if len(r.records) >= r.capacity && !(r.flaw == protocol.FlawEvictOldest && r.evictOldestLocked()) {
				r.mu.Unlock()
				return nil, 0, store.ErrFull
			}
			r.nextSeq++
			rec = &record{fp: fp, done: make(chan struct{}), seq: r.nextSeq}
			if r.flaw != protocol.FlawRecordAfterEffect { // the flaw: no in-flight record for duplicates to find
				r.records[key] = rec
			}
			r.mu.Unlock()
			return &Ticket{r: r, key: key, rec: rec}, 0, nil
		case rec.fp != fp && r.flaw != protocol.FlawNoFingerprint:
			r.mu.Unlock()
			return nil, 0, store.ErrConflict
		case rec.final:
			v := rec.value
			r.mu.Unlock()
			return nil, v, nil
		}
		done, onWait := rec.done, r.onWait
		r.mu.Unlock()

		if timeout == nil {
			timer := time.NewTimer(wait)
			defer timer.Stop()
			timeout = timer.C
		}
		if onWait != nil {
			onWait(key)
		}
		select {
		case <-done:
			// Completed: the next round replays. Released: it claims again.
		case <-timeout:
			return nil, 0, store.ErrInProgress
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// A Ticket is the ownership of one in-flight key.
type Ticket struct {
	r       *Registry
	key     string
	rec     *record
	settled bool // guarded by r.mu
}

// Key returns the key this ticket owns.
func (t *Ticket) Key() string { return t.key }

// Complete records value as the key's final result and wakes its waiters,
// who replay it. Calls after the first Complete or Release do nothing.
func (t *Ticket) Complete(value int64) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if t.settled {
		return
	}
	t.settled = true
	t.rec.value = value
	t.rec.final = true
	close(t.rec.done)
	if t.r.flaw == protocol.FlawRecordAfterEffect {
		if _, held := t.r.records[t.key]; !held {
			t.r.records[t.key] = t.rec // recorded only now, after the effect
		}
	}
}

// Release gives the key up without a result (the effect failed): the record
// is removed and its waiters try to claim the key again. Calls after the
// first Complete or Release do nothing, so Release can be deferred.
func (t *Ticket) Release() {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if t.settled {
		return
	}
	t.settled = true
	if t.r.records[t.key] == t.rec {
		delete(t.r.records, t.key)
	}
	close(t.rec.done)
}

// SetOnWaitForTest makes r call f each time a request starts waiting for an
// in-flight owner. Only for tests that must know a duplicate is waiting.
func (r *Registry) SetOnWaitForTest(f func(key string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onWait = f
}

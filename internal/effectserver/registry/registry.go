// Package registry is the in-process table of idempotency keys: it decides,
// atomically, whether a keyed request owns its key, replays a recorded
// result, waits for an owner still in flight, or is refused.
//
// Lookup and record creation happen under one lock (the claim); the owner
// runs the effect outside the lock and then completes the record with its
// result, or releases it when the effect failed so that a later request can
// run. Duplicates that arrive while the owner is in flight wait for it,
// bounded, and share its result. The table holds at most a fixed number of
// keys, in-flight ones included, and never evicts. With a key TTL
// (SetKeyTTL) a recorded key expires that long after it was recorded: it is
// then absent (a retry runs the effect again) and frees its place.
//
// The volatile store keeps results only here; a durable store also loads the
// results it kept into a Registry with Restore, so the claim and wait logic
// is the same for both.
//
// The server holds its registry as a Table. This package is only the sound
// algorithm: the classic bugs the lab builds in on purpose (package unsaferegistry)
// wrap a Registry from outside and are never consulted here.
package registry

import (
	"context"
	"errors"
	"sync"
	"time"

	"idemlab/internal/store"
)

// ErrExists is returned by Restore for a key already held.
var ErrExists = errors.New("key already recorded")

// A Table is what the server needs of a key registry: Registry, or a
// deliberately broken one wrapped around it (package unsaferegistry).
type Table interface {
	// Acquire claims key (see Registry.Acquire).
	Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (t Ticket, value int64, err error)
	// Restore records a result kept by a store (see Registry.Restore).
	Restore(key string, fp store.Fingerprint, value int64) error
	// Len returns the number of keys held.
	Len() int
}

// A Ticket is the ownership of one in-flight key.
type Ticket interface {
	// Key returns the key this ticket owns.
	Key() string
	// Complete records value as the key's result and wakes its waiters.
	Complete(value int64)
	// Release gives the key up without a result (the effect failed).
	Release()
	// ReplyLost says the owner's reply could not be delivered; the record
	// stays, so the client's retry replays it.
	ReplyLost()
}

// A Registry is a bounded table of keys, the sound one. Its methods are
// safe for concurrent use.
type Registry struct {
	capacity int

	store.KeyClock // the key TTL (none: recorded keys never expire) and the clock

	mu      sync.Mutex
	records map[string]*record

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
	at    time.Time // when the result was recorded (final only)
}

// New returns an empty Registry holding at most capacity keys, which never
// expire until SetKeyTTL says otherwise.
func New(capacity int) *Registry {
	return &Registry{capacity: capacity, records: make(map[string]*record)}
}

// expired reports whether rec is a recorded result past the key TTL at t.
// Called with mu held.
func (r *Registry) expired(rec *record, t time.Time) bool {
	return rec.final && r.Expired(rec.at, t)
}

// purge removes every expired key. Called with mu held.
func (r *Registry) purge(t time.Time) {
	if _, ok := r.ExpiredBefore(t); !ok { // no TTL: nothing expires
		return
	}
	for k, rec := range r.records {
		if r.expired(rec, t) {
			delete(r.records, k)
		}
	}
}

// Len returns the number of live keys held, in flight or recorded.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.purge(r.Now())
	return len(r.records)
}

// Restore records value as the final result of key, recorded now, as a
// durable store does at start for the results it kept (see RestoreAt).
func (r *Registry) Restore(key string, fp store.Fingerprint, value int64) error {
	return r.RestoreAt(key, fp, value, r.Now())
}

// RestoreAt records value as the final result of key, recorded at at. It
// fails if key is already held or the registry is full; a result already
// past the key TTL is not kept (nil).
func (r *Registry) RestoreAt(key string, fp store.Fingerprint, value int64, at time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.Now()
	rec := &record{fp: fp, done: make(chan struct{}), final: true, value: value, at: at}
	close(rec.done)
	if r.expired(rec, t) {
		return nil
	}
	if old, ok := r.records[key]; ok && !r.expired(old, t) {
		return ErrExists
	}
	delete(r.records, key)
	if len(r.records) >= r.capacity {
		r.purge(t)
	}
	if len(r.records) >= r.capacity {
		return store.ErrFull
	}
	r.records[key] = rec
	return nil
}

// Forget removes key's recorded result and reports whether there was one.
// A key still in flight is not touched.
func (r *Registry) Forget(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.records[key]; ok && rec.final {
		delete(r.records, key)
		return true
	}
	return false
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
func (r *Registry) Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (t Ticket, value int64, err error) {
	var timeout <-chan time.Time
	for {
		r.mu.Lock()
		now := r.Now()
		rec, ok := r.records[key]
		if ok && r.expired(rec, now) {
			delete(r.records, key) // expired: absent, a new effect
			ok = false
		}
		switch {
		case !ok:
			if len(r.records) >= r.capacity {
				r.purge(now)
			}
			if len(r.records) >= r.capacity {
				r.mu.Unlock()
				return nil, 0, store.ErrFull
			}
			rec = &record{fp: fp, done: make(chan struct{})}
			r.records[key] = rec
			r.mu.Unlock()
			return &ticket{r: r, key: key, rec: rec}, 0, nil
		case rec.fp != fp:
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

// ticket is the sound registry's Ticket.
type ticket struct {
	r       *Registry
	key     string
	rec     *record
	settled bool // guarded by r.mu
}

// Key returns the key this ticket owns.
func (t *ticket) Key() string { return t.key }

// Complete records value as the key's final result and wakes its waiters,
// who replay it. Calls after the first Complete or Release do nothing.
func (t *ticket) Complete(value int64) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if t.settled {
		return
	}
	t.settled = true
	t.rec.value = value
	t.rec.final = true
	t.rec.at = t.r.Now()
	close(t.rec.done)
}

// ReplyLost does nothing: the record stays, and the client's retry
// replays it.
func (t *ticket) ReplyLost() {}

// Release gives the key up without a result (the effect failed): the record
// is removed and its waiters try to claim the key again. Calls after the
// first Complete or Release do nothing, so Release can be deferred.
func (t *ticket) Release() {
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

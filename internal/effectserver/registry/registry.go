// Package registry is the in-process table of idempotency keys: it decides
// atomically whether a keyed request owns its key, replays a recorded
// result, waits (bounded) for an owner in flight, or is refused. The owner
// runs the effect outside the lock, then completes or releases the record.
// The table is bounded and never evicts. A durable store loads its results
// here with Restore, so claim and wait logic is one for every store.
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
	Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (t Ticket, value int64, err error)
	Restore(key string, fp store.Fingerprint, value int64) error
	Len() int
}

// A Ticket is the ownership of one in-flight key.
type Ticket interface {
	Key() string
	Complete(value int64) // record value and wake the waiters
	Release()             // give the key up without a result
	ReplyLost()           // the owner's reply was lost; a sound record stays
}

// A Registry is the sound bounded table of keys.
type Registry struct {
	capacity int

	store.KeyClock

	mu      sync.Mutex
	records map[string]*record
	onWait  func(key string) // set by a test; called outside the lock
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

// New returns an empty Registry holding at most capacity keys.
func New(capacity int) *Registry {
	return &Registry{capacity: capacity, records: make(map[string]*record)}
}

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

// Restore is RestoreAt now.
func (r *Registry) Restore(key string, fp store.Fingerprint, value int64) error {
	return r.RestoreAt(key, fp, value, r.Now())
}

// RestoreAt records value as key's result, recorded at at: ErrExists if
// held, store.ErrFull if full; one past the key TTL is dropped.
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

// Forget removes key's recorded result (not an in-flight one) and reports
// whether there was one.
func (r *Registry) Forget(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.records[key]; ok && rec.final {
		delete(r.records, key)
		return true
	}
	return false
}

// Acquire claims key for a body of fingerprint fp: an owner Ticket, a
// recorded value to replay (nil Ticket and error), store.ErrConflict,
// store.ErrFull, store.ErrInProgress (an owner in flight past wait) or
// ctx.Err(). A waiter whose owner releases claims again within the same
// wait.
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

func (t *ticket) Key() string { return t.key }

// Complete records value and wakes the waiters, who replay it. Calls after
// the first Complete or Release do nothing.
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

// ReplyLost does nothing: the record stays for the client's retry.
func (t *ticket) ReplyLost() {}

// Release removes the record; its waiters claim again. It is a no-op
// after Complete, so it can be deferred.
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

// SetOnWaitForTest makes r call f each time a request starts waiting.
func (r *Registry) SetOnWaitForTest(f func(key string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onWait = f
}

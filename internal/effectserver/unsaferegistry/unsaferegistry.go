// Package unsaferegistry builds the classic key-registry bugs the lab
// swaps in on purpose (effectserver -unsafe-registry), to prove its cases
// catch each one. Each mutant wraps a sound registry.Registry from
// outside, so package registry shows only the sound algorithm.
package unsaferegistry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"idemlab/internal/effectserver/registry"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// New returns a key table of capacity keys with flaw built in; the sound
// registry for protocol.Sound.
func New(flaw protocol.Flaw, capacity int) (registry.Table, error) {
	r := registry.New(capacity)
	switch flaw {
	case protocol.Sound:
		return r, nil
	case protocol.FlawRecordAfterEffect:
		return recordAfterEffect{r}, nil
	case protocol.FlawNoFingerprint:
		return noFingerprint{r}, nil
	case protocol.FlawEvictOldest:
		return &evictOldest{Registry: r}, nil
	case protocol.FlawForgetOnLostReply:
		return forgetOnLostReply{r}, nil
	case protocol.FlawRecordBeforeEffect:
		return &recordBeforeEffect{Registry: r}, nil
	case protocol.FlawCheckThenAct:
		return &checkThenAct{Registry: r, gap: func(string) { time.Sleep(CheckThenActGap) }}, nil
	}
	_, err := protocol.ParseFlaw(string(flaw))
	return nil, fmt.Errorf("unsafe registry: %w", err)
}

// recordAfterEffect records a key only once its effect is done: the claim
// is let go at once, so concurrent duplicates find nothing in flight and
// each run the effect (the bug that looks like a fix).
type recordAfterEffect struct{ *registry.Registry }

func (m recordAfterEffect) Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (registry.Ticket, int64, error) {
	t, v, err := m.Registry.Acquire(ctx, key, fp, wait)
	if t == nil {
		return nil, v, err
	}
	t.Release() // the flaw: no in-flight record for duplicates to find
	return recordLater{m.Registry, key, fp}, 0, nil
}

// recordLater is an owner without a record of its own: its result is
// recorded on Complete, unless a duplicate's record came first.
type recordLater struct {
	r   *registry.Registry
	key string
	fp  store.Fingerprint
}

func (t recordLater) Key() string          { return t.key }
func (t recordLater) Complete(value int64) { _ = t.r.Restore(t.key, t.fp, value) }
func (t recordLater) Release()             {}
func (t recordLater) ReplyLost()           {}

// noFingerprint ignores the body: every request looks alike, so a reused
// key with another body replays the first result instead of 422.
type noFingerprint struct{ *registry.Registry }

func (m noFingerprint) Acquire(ctx context.Context, key string, _ store.Fingerprint, wait time.Duration) (registry.Ticket, int64, error) {
	return m.Registry.Acquire(ctx, key, store.Fingerprint{}, wait)
}

func (m noFingerprint) Restore(key string, _ store.Fingerprint, value int64) error {
	return m.Registry.Restore(key, store.Fingerprint{}, value)
}

// evictOldest makes room for a new key at capacity by forgetting the
// oldest recorded one instead of answering 429, so a late retry of that
// key runs the effect again.
type evictOldest struct {
	*registry.Registry
	mu    sync.Mutex
	order []string // keys in the order their results were recorded
}

func (m *evictOldest) Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (registry.Ticket, int64, error) {
	for {
		t, v, err := m.Registry.Acquire(ctx, key, fp, wait)
		if err != store.ErrFull || !m.evictOne() {
			if t != nil {
				return evictTicket{t, m}, v, err
			}
			return nil, v, err
		}
	}
}

func (m *evictOldest) Restore(key string, fp store.Fingerprint, value int64) error {
	if err := m.Registry.Restore(key, fp, value); err != nil {
		return err
	}
	m.recorded(key)
	return nil
}

func (m *evictOldest) recorded(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.order = append(m.order, key)
}

// evictOne forgets the oldest recorded key, if any.
func (m *evictOldest) evictOne() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.order) > 0 {
		k := m.order[0]
		m.order = m.order[1:]
		if m.Registry.Forget(k) {
			return true
		}
	}
	return false
}

// evictTicket notes when its key's result is recorded.
type evictTicket struct {
	registry.Ticket
	m *evictOldest
}

func (t evictTicket) Complete(value int64) {
	t.Ticket.Complete(value)
	t.m.recorded(t.Key())
}

// forgetOnLostReply drops a key's record when its reply could not be
// delivered, so the client's retry runs the effect again.
type forgetOnLostReply struct{ *registry.Registry }

func (m forgetOnLostReply) Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (registry.Ticket, int64, error) {
	t, v, err := m.Registry.Acquire(ctx, key, fp, wait)
	if t == nil {
		return nil, v, err
	}
	return forgetTicket{t, m.Registry}, v, err
}

type forgetTicket struct {
	registry.Ticket
	r *registry.Registry
}

func (t forgetTicket) ReplyLost() { t.r.Forget(t.Key()) }

// recordBeforeEffect is the phantom success: the key's record is complete,
// with a placeholder result, from the claim on ("INSERT key, status done;
// then call the provider; then UPDATE the response"). A duplicate during
// the effect replays the placeholder (concurrent_duplicate's duplicates
// get "0"), and a failed effect leaves the success recorded. A crash does
// not show it: the phantom lives in the process's memory.
type recordBeforeEffect struct {
	*registry.Registry
	// mu makes the claim with its phantom, and the overwrite, each one
	// step: the flaw is the order, not a race.
	mu sync.Mutex
}

// phantomValue is what a record-before-effect record replays until the
// real result is filled in.
const phantomValue = 0

func (m *recordBeforeEffect) Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (registry.Ticket, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// No record is ever in flight outside mu, so this never waits.
	t, v, err := m.Registry.Acquire(ctx, key, fp, wait)
	if t == nil {
		return nil, v, err
	}
	t.Complete(phantomValue) // the flaw: "done" before the effect has run
	return phantomTicket{m, key, fp}, 0, nil
}

// phantomTicket is an owner whose record already says done.
type phantomTicket struct {
	m   *recordBeforeEffect
	key string
	fp  store.Fingerprint
}

func (t phantomTicket) Key() string { return t.key }

// Complete fills in the real result over the placeholder.
func (t phantomTicket) Complete(value int64) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.m.Registry.Forget(t.key) {
		_ = t.m.Registry.Restore(t.key, t.fp, value) // the slot just freed is this key's
	}
}

// Release does nothing: the effect failed, and the record still says done.
func (t phantomTicket) Release()   {}
func (t phantomTicket) ReplyLost() {}

// CheckThenActGap is check-then-act's wait between check and insert (a
// SELECT-to-INSERT round trip), long enough that duplicates released
// together all fall into it on every run.
const CheckThenActGap = 20 * time.Millisecond

// checkThenAct claims a key as a check, then a blind insert: "if
// !exists(key) { put(key, inProgress); doEffect() }" without a
// compare-and-set. Duplicates that all pass the check each own the key and
// each run the effect.
type checkThenAct struct {
	*registry.Registry
	gap func(key string) // between the check and the insert
}

func (m *checkThenAct) Acquire(ctx context.Context, key string, fp store.Fingerprint, wait time.Duration) (registry.Ticket, int64, error) {
	// The check: the sound registry's answer, unless the key is free.
	t, v, err := m.Registry.Acquire(ctx, key, fp, wait)
	if t == nil {
		return nil, v, err
	}
	t.Release() // the check only looked
	m.gap(key)
	// The insert, without looking again: an owner either way.
	t, _, err = m.Registry.Acquire(ctx, key, fp, 0)
	switch {
	case t != nil:
		return t, 0, nil
	case errors.Is(err, store.ErrFull):
		return nil, 0, err
	}
	// Another request inserted the key in the gap (in flight, recorded,
	// or with another body): the blind insert takes it over.
	return recordLater{m.Registry, key, fp}, 0, nil
}

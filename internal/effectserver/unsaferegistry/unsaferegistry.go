// Package unsaferegistry builds the classic key-registry bugs the lab swaps in on
// purpose (effectserver -unsafe-registry NAME, only with -faults), so that
// the lab can prove its cases catch each one: a lab whose checks cannot
// fail proves nothing.
//
// Each mutant wraps a sound registry.Registry from outside and changes one
// thing about how the server uses it; the sound registry never knows a
// mutant exists, so reading package registry shows only the sound
// algorithm.
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

// recordLater is an owner with no record in the registry (record after
// effect) or one whose record another owner holds too (check-then-act):
// its result is recorded only on Complete, and only if the key has no
// record by then (a duplicate that completed first keeps its record).
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

// recordBeforeEffect is the phantom success: the record is written as
// complete the moment the key is claimed, before the effect runs, with a
// placeholder result (phantomValue: the zero a result column holds before
// anything is known), and the real result is filled in only once the
// effect is done. It is the classic "INSERT key, status done; then call
// the payment provider; then UPDATE the response" written in that order.
//
// Two things follow. A duplicate that arrives while the owner's effect is
// still running finds a complete record and replays the placeholder: it is
// told "done" (200, replayed) for an effect that has not happened yet. And
// when the effect then fails, nothing takes the record back (Release does
// nothing): every retry replays a success whose effect never happened.
//
// With the lab's faults the first is what a case sees: in
// concurrent_duplicate the eleven duplicates arrive while the slow owner is
// in flight and replay "0" instead of waiting for its "1". The crash faults
// do not show it, and the doc says why rather than pretending: the phantom
// lives in the process's memory, so a crash takes it away with the
// process (a durable store restores only keys it committed with their
// effect), and no lab fault makes an effect fail without a crash.
type recordBeforeEffect struct {
	*registry.Registry
	// mu makes the claim and its phantom record, and the later overwrite
	// with the real result, each one step: no request ever sees the key
	// in flight or missing in between. The flaw is the order, not a race.
	mu sync.Mutex
}

// phantomValue is the result a record-before-effect record replays until
// the effect's real result is filled in.
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

// CheckThenActGap is how long check-then-act waits between its check and
// its insert: the round trip between a SELECT and an INSERT on a key table
// in another process, made long enough that duplicates released together
// (concurrent_duplicate's twelve) all fall into it on every run.
const CheckThenActGap = 20 * time.Millisecond

// checkThenAct claims a key in two steps instead of one: a check (is the
// key recorded, held for another body, or in flight? then answer as the
// sound registry would), then, if the key was free, a blind insert that
// makes the caller the owner whatever happened since the check. It is the
// classic "if !exists(key) { put(key, inProgress); doEffect() }" without a
// compare-and-set or a unique constraint. Duplicates that arrive after an
// insert wait for the owner as they should; duplicates that all pass the
// check before any of them inserts each become an owner and each run the
// effect: concurrent_duplicate applies its key more than once.
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

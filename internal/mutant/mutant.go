// Package mutant builds the classic key-registry bugs the lab swaps in on
// purpose (effectserver -unsafe-registry NAME, only with -faults), so that
// the lab can prove its cases catch each one: a lab whose checks cannot
// fail proves nothing.
//
// Each mutant wraps a sound registry.Registry from outside and changes one
// thing about how the server uses it; the sound registry never knows a
// mutant exists, so reading package registry shows only the sound
// algorithm.
package mutant

import (
	"context"
	"fmt"
	"sync"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/registry"
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
	}
	_, err := protocol.ParseFlaw(string(flaw))
	return nil, fmt.Errorf("mutant: %w", err)
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

// recordLater is an owner whose record is written only on Complete.
type recordLater struct {
	r   *registry.Registry
	key string
	fp  store.Fingerprint
}

func (t recordLater) Key() string { return t.key }

// Complete records the result now, after the effect; a duplicate that
// completed first keeps its record.
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

package registry

import "idemlab/internal/protocol"

// NewUnsafe returns a Registry with flaw f built in. Only the lab's
// mutation runs use it.
func NewUnsafe(capacity int, f protocol.Flaw) *Registry {
	r := New(capacity)
	r.flaw = f
	return r
}

// Flaw returns the flaw built into r (protocol.Sound for New).
func (r *Registry) Flaw() protocol.Flaw { return r.flaw }

// ReplyLost tells the registry that the owner's reply for t could not be
// delivered. A sound registry keeps the record (the retry must replay it);
// protocol.FlawForgetOnLostReply drops it.
func (t *Ticket) ReplyLost() {
	r := t.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flaw == protocol.FlawForgetOnLostReply && r.records[t.key] == t.rec {
		delete(r.records, t.key)
	}
}

// evictOldestLocked removes the oldest recorded (not in-flight) key and
// reports whether it found one. Only protocol.FlawEvictOldest uses it; r.mu is held.
func (r *Registry) evictOldestLocked() bool {
	oldest := ""
	var seq uint64
	for k, rec := range r.records {
		if rec.final && (oldest == "" || rec.seq < seq) {
			oldest, seq = k, rec.seq
		}
	}
	if oldest == "" {
		return false
	}
	delete(r.records, oldest)
	return true
}

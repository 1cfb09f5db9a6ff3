package registry

import (
	"fmt"
	"strings"
)

// A Flaw is one classic registry bug the lab can swap in on purpose
// (effectserver -unsafe-registry), to prove that its cases catch it: a lab
// whose checks cannot fail proves nothing. The zero Flaw is the sound
// registry.
type Flaw string

// The flaws, each named after what it gets wrong.
const (
	Sound Flaw = ""

	// RecordAfterEffect records a key only once its effect is done, so
	// concurrent duplicates miss the in-flight owner and each run the
	// effect: the bug that looks like a fix.
	RecordAfterEffect Flaw = "record-after-effect"

	// NoFingerprint ignores the body: a reused key with another body
	// replays the first result instead of 422.
	NoFingerprint Flaw = "no-fingerprint"

	// EvictOldest makes room for a new key at capacity by forgetting the
	// oldest recorded one instead of answering 429, so a late retry of that
	// key runs the effect again.
	EvictOldest Flaw = "evict-oldest"

	// ForgetOnLostReply drops a key's record when its reply could not be
	// delivered, so the client's retry runs the effect again.
	ForgetOnLostReply Flaw = "forget-on-lost-reply"
)

// Flaws lists every flaw by name, in a fixed order.
var Flaws = []Flaw{RecordAfterEffect, NoFingerprint, EvictOldest, ForgetOnLostReply}

// ParseFlaw returns the flaw called name, or an error listing the names.
func ParseFlaw(name string) (Flaw, error) {
	for _, f := range Flaws {
		if string(f) == name {
			return f, nil
		}
	}
	names := make([]string, len(Flaws))
	for i, f := range Flaws {
		names[i] = string(f)
	}
	return Sound, fmt.Errorf("unknown unsafe registry %q (want one of %s)", name, strings.Join(names, ", "))
}

// NewUnsafe returns a Registry with flaw f built in. Only the lab's
// mutation runs use it.
func NewUnsafe(capacity int, f Flaw) *Registry {
	r := New(capacity)
	r.flaw = f
	return r
}

// Flaw returns the flaw built into r (Sound for New).
func (r *Registry) Flaw() Flaw { return r.flaw }

// ReplyLost tells the registry that the owner's reply for t could not be
// delivered. A sound registry keeps the record (the retry must replay it);
// ForgetOnLostReply drops it.
func (t *Ticket) ReplyLost() {
	r := t.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flaw == ForgetOnLostReply && r.records[t.key] == t.rec {
		delete(r.records, t.key)
	}
}

// evictOldestLocked removes the oldest recorded (not in-flight) key and
// reports whether it found one. Only EvictOldest calls it; r.mu is held.
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

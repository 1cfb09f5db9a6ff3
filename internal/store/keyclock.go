package store

import "time"

// KeyClock is a key table's TTL and clock, embedded in every store and
// in-memory table that keeps recording times. Set both before use.
type KeyClock struct {
	ttl time.Duration    // 0: keys never expire
	now func() time.Time // nil: time.Now
}

// SetKeyTTL makes a recorded key expire d after it was recorded (0: never).
func (k *KeyClock) SetKeyTTL(d time.Duration) { k.ttl = d }

// SetClockForTest makes the store read the time from now.
func (k *KeyClock) SetClockForTest(now func() time.Time) { k.now = now }

// Now is the store's time: time.Now unless a test set a clock.
func (k *KeyClock) Now() time.Time {
	if k.now != nil {
		return k.now()
	}
	return time.Now()
}

// Expired reports whether a key recorded at at is past the key TTL at t.
func (k *KeyClock) Expired(at, t time.Time) bool {
	return k.ttl > 0 && !t.Before(at.Add(k.ttl))
}

// ExpiredBefore returns the recording time (Unix ms) at or before which a
// key is expired at t; ok is false without a TTL.
func (k *KeyClock) ExpiredBefore(t time.Time) (ms int64, ok bool) {
	if k.ttl <= 0 {
		return 0, false
	}
	return t.Add(-k.ttl).UnixMilli(), true
}

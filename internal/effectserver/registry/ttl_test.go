package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"idemlab/internal/store"
)

// Ensure a recorded key replays until the key TTL runs out, is then a new
// effect, and frees its place in a full registry; RestoreAt keeps the time
// a result was recorded.
func TestKeyTTL(t *testing.T) {
	const ttl = 10 * time.Second
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := New(2)
	r.SetKeyTTL(ttl)
	r.SetClockForTest(func() time.Time { return now })
	fp := store.FingerprintOf([]byte("add-one"))
	acquire := func(key string) (owner bool, value int64, err error) {
		tk, v, err := r.Acquire(context.Background(), key, fp, time.Millisecond)
		if tk != nil {
			tk.Complete(int64(len(key)) * 10)
			return true, 0, err
		}
		return false, v, err
	}
	if err := r.RestoreAt("old", fp, 1, now.Add(-ttl)); err != nil {
		t.Fatalf("RestoreAt(expired) = %v, want nil (not kept)", err)
	}
	if err := r.RestoreAt("kept", fp, 2, now.Add(-ttl/2)); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		advance time.Duration
		key     string
		owner   bool
		value   int64
		err     error
		len     int
	}{
		{"an expired restored key was not kept", 0, "old", true, 0, nil, 2},
		{"a restored key replays within its TTL", 0, "kept", false, 2, nil, 2},
		{"a full registry refuses a new key", 0, "newkey", false, 0, store.ErrFull, 2},
		{"the restored key's TTL ran out: its place is free", ttl / 2, "newkey", true, 0, nil, 2},
		{"a key replays just before its TTL", ttl/2 - time.Nanosecond, "old", false, 30, nil, 2},
		{"and is a new effect at its TTL", time.Nanosecond, "old", true, 0, nil, 2},
		{"everything expired: Len counts live keys only", 10 * ttl, "", false, 0, nil, 0},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		if s.key != "" {
			owner, value, err := acquire(s.key)
			if !errors.Is(err, s.err) || owner != s.owner || value != s.value {
				t.Fatalf("%s: Acquire(%s) = owner %v value %d err %v, want %v %d %v", s.name, s.key, owner, value, err, s.owner, s.value, s.err)
			}
		}
		if got, want := r.Len(), s.len; got != want {
			t.Fatalf("%s: Len() = %d, want %d", s.name, got, want)
		}
	}
}

// Ensure a registry without a TTL keeps keys forever.
func TestNoTTLKeepsKeys(t *testing.T) {
	now := time.Now()
	r := New(1)
	r.SetClockForTest(func() time.Time { return now })
	fp := store.FingerprintOf(nil)
	tk, _, _ := r.Acquire(context.Background(), "k", fp, time.Millisecond)
	tk.Complete(1)
	now = now.Add(1000 * time.Hour)
	if tk, v, err := r.Acquire(context.Background(), "k", fp, time.Millisecond); tk != nil || v != 1 || err != nil {
		t.Fatalf("Acquire after 1000h = %v, %d, %v; want a replay of 1", tk, v, err)
	}
}

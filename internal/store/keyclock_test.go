package store

import (
	"testing"
	"time"
)

// Ensure a KeyClock reads the test's clock once one is set, and names the
// expiry cut-off, and expires a key recorded TTL ago, only when a TTL is set.
func TestKeyClock(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	tests := []struct {
		name   string
		ttl    time.Duration
		wantMS int64
		wantOK bool
	}{
		{"no TTL: keys never expire", 0, 0, false},
		{"a TTL: keys recorded at or before now - TTL", 10 * time.Second, at.Add(-10 * time.Second).UnixMilli(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k KeyClock
			k.SetKeyTTL(tt.ttl)
			k.SetClockForTest(func() time.Time { return at })
			if got := k.Now(); !got.Equal(at) {
				t.Fatalf("Now() = %v, want the test's clock %v", got, at)
			}
			ms, ok := k.ExpiredBefore(k.Now())
			if ms != tt.wantMS || ok != tt.wantOK {
				t.Fatalf("ExpiredBefore() = %d, %v; want %d, %v", ms, ok, tt.wantMS, tt.wantOK)
			}
			if got := k.Expired(at.Add(-tt.ttl), at); got != tt.wantOK {
				t.Fatalf("Expired(recorded TTL ago) = %v, want %v", got, tt.wantOK)
			}
			if k.Expired(at.Add(-tt.ttl+time.Nanosecond), at) {
				t.Fatal("Expired(recorded less than TTL ago) = true, want false")
			}
		})
	}
	var real KeyClock
	if d := time.Since(real.Now()); d < 0 || d > time.Hour {
		t.Errorf("Now() without a test clock is %v away from time.Now", d)
	}
}

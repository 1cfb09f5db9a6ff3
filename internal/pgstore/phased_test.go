package pgstore

import (
	"errors"
	"testing"
	"time"

	"idemlab/internal/phasedtest"
	"idemlab/internal/store"
)

// Ensure the claims keep the store.Phased contract: leases, takeover,
// tokens, capacity and the key TTL, each phase committed.
func TestPhasedContract(t *testing.T) {
	phasedtest.Run(t, func(t *testing.T, capacity int, ttl time.Duration, now *time.Time) store.Phased {
		s := open(t, newDB(t), capacity, time.Second)
		s.SetKeyTTL(ttl)
		s.SetClockForTest(func() time.Time { return *now })
		return s
	})
}

// Ensure a claim made by one replica is busy for another until its lease
// ends, then taken over there, and the first owner can no longer complete.
func TestClaimAcrossReplicas(t *testing.T) {
	dsn := newDB(t)
	now := time.Now()
	clock := func() time.Time { return now }
	a, b := open(t, dsn, 4, time.Second), open(t, dsn, 4, time.Second)
	a.SetClockForTest(clock)
	b.SetClockForTest(clock)
	in := intent("k", "add-one")
	first, err := a.Claim(in, time.Second)
	if err != nil || first.State != store.Owned {
		t.Fatalf("Claim = %+v, %v; want Owned", first, err)
	}
	if c, err := b.Claim(in, time.Second); err != nil || c.State != store.Busy {
		t.Fatalf("Claim on the other replica within the lease = %+v, %v; want Busy", c, err)
	}
	now = now.Add(time.Second)
	second, err := b.Claim(in, time.Second)
	if err != nil || second.State != store.Owned || !second.TakenOver {
		t.Fatalf("Claim after the lease = %+v, %v; want Owned, taken over", second, err)
	}
	if err := a.Complete("k", first.Token, 1); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete(first owner) = %v, want ErrClaimLost", err)
	}
	if err := b.Complete("k", second.Token, 2); err != nil {
		t.Fatal(err)
	}
	if c, err := a.Claim(in, time.Second); err != nil || c.State != store.Recorded || c.Value != 2 {
		t.Fatalf("Claim after Complete = %+v, %v; want Recorded 2", c, err)
	}
}

// Ensure the key TTL applies to Apply's keys: a replay within it, a new
// effect after it, and an expired key's place taken by a new key in a
// full store; RecordedWithTimes leaves expired keys out.
func TestApplyKeyTTL(t *testing.T) {
	const ttl = 10 * time.Second
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := open(t, newDB(t), 2, time.Second)
	s.SetKeyTTL(ttl)
	s.SetClockForTest(func() time.Time { return now })
	steps := []struct {
		name     string
		advance  time.Duration
		key      string
		value    int64
		replayed bool
		err      error
		live     int
	}{
		{"a applies", 0, "a", 1, false, nil, 1},
		{"b applies", ttl / 2, "b", 2, false, nil, 2},
		{"c finds the store full", 0, "c", 0, false, store.ErrFull, 2},
		{"a replays just before its TTL", ttl/2 - time.Millisecond, "a", 1, true, nil, 2},
		{"a is a new effect at its TTL", time.Millisecond, "a", 3, false, nil, 2},
		{"c still finds the store full", 0, "c", 0, false, store.ErrFull, 2},
		{"b expired: c takes its place", ttl / 2, "c", 4, false, nil, 2},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		res, err := s.Apply(intent(st.key, "add-one"), noHook)
		if !errors.Is(err, st.err) || res.Value != st.value || res.Replayed != st.replayed {
			t.Fatalf("%s: Apply(%s) = %+v, %v; want value %d replayed %v, %v", st.name, st.key, res, err, st.value, st.replayed, st.err)
		}
		recs, err := s.RecordedWithTimes()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(recs), st.live; got != want {
			t.Fatalf("%s: RecordedWithTimes() holds %d keys, want %d", st.name, got, want)
		}
	}
}

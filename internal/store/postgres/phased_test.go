package postgres

import (
	"errors"
	"testing"
	"time"

	"idemlab/internal/store"
	"idemlab/internal/store/storetest"
)

// subject is a fresh store of capacity and key TTL ttl whose clock reads
// *now, for the storetest contracts.
func subject(t *testing.T, capacity int, ttl time.Duration, now *time.Time) *Store {
	s := open(t, newDB(t), capacity, time.Second)
	s.SetKeyTTL(ttl)
	s.SetClockForTest(func() time.Time { return *now })
	return s
}

// Ensure the claims keep the store.Phased contract: leases, takeover,
// tokens, capacity and the key TTL, each phase committed.
func TestPhasedContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, capacity int, ttl time.Duration, now *time.Time) store.Phased {
		return subject(t, capacity, ttl, now)
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

// Ensure the key TTL applies to Apply's keys (storetest.ApplyTTL).
func TestApplyKeyTTL(t *testing.T) {
	storetest.ApplyTTL(t, func(t *testing.T, capacity int, ttl time.Duration, now *time.Time) storetest.Applier {
		return subject(t, capacity, ttl, now)
	})
}

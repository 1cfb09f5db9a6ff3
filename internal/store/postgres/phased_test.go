package postgres

import (
	"errors"
	"testing"
	"time"

	"idemlab/internal/store"
	"idemlab/internal/store/storetest"
)

// openEmpty opens a store of capacity on a fresh database, for the
// storetest contracts.
func openEmpty(t *testing.T, capacity int) *Store { return open(t, newDB(t), capacity, time.Second) }

// Ensure the claims keep the store.Phased contract: leases, takeover,
// tokens, capacity and the key TTL, each phase committed.
func TestPhasedContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, openEmpty)
}

// Ensure a claim made by one replica is busy for another until its lease
// ends, then taken over there, and the first owner, on its own replica,
// can no longer complete and finds the taker's result.
func TestClaimAcrossReplicas(t *testing.T) {
	t.Parallel()
	dsn := newDB(t)
	a := open(t, dsn, 4, time.Second)
	in := intent("k", "add-one")
	first := storetest.Takeover(t, in, a, func() *Store { return open(t, dsn, 4, time.Second) })
	if err := a.Complete("k", first, 1); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete(first owner) on its replica = %v, want ErrClaimLost", err)
	}
	if c, err := a.Claim(in, time.Second); err != nil || c.State != store.Recorded || c.Value != 2 {
		t.Fatalf("Claim on the first replica after Complete = %+v, %v; want Recorded 2", c, err)
	}
}

// Ensure the key TTL applies to Apply's keys (storetest.ApplyTTL).
func TestApplyKeyTTL(t *testing.T) {
	t.Parallel()
	storetest.ApplyTTL(t, openEmpty)
}

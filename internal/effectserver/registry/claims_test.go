package registry

import (
	"testing"
	"time"

	"idemlab/internal/store"
	"idemlab/internal/store/storetest"
)

// Ensure the in-memory claims keep the store.Phased contract: leases,
// takeover, tokens, capacity and the key TTL.
func TestClaimsContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, capacity int, ttl time.Duration, now *time.Time) store.Phased {
		c := NewClaims(capacity)
		c.SetKeyTTL(ttl)
		c.SetClockForTest(func() time.Time { return *now })
		return c
	})
}

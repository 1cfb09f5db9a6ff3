package registry

import (
	"testing"

	"idemlab/internal/store/storetest"
)

// Ensure the in-memory claims keep the store.Phased contract: leases,
// takeover, tokens, capacity and the key TTL.
func TestClaimsContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, capacity int) *Claims { return NewClaims(capacity) })
}

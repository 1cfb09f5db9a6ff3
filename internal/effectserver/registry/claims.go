package registry

import (
	"sync"
	"time"

	"idemlab/internal/store"
)

// Claims is the volatile store's store.Phased, in memory only: a restart
// forgets every claim and result, the volatile store's design.
type Claims struct {
	capacity int

	store.KeyClock // the key TTL and the clock

	mu     sync.Mutex
	claims map[string]*claim
}

// claim is one key: claimed (recorded false) or recorded.
type claim struct {
	fp         store.Fingerprint
	token      string
	leaseUntil time.Time
	recorded   bool
	value      int64
	at         time.Time // when recorded
}

var _ store.Phased = (*Claims)(nil)

// NewClaims returns an empty table of at most capacity live keys.
func NewClaims(capacity int) *Claims {
	return &Claims{capacity: capacity, claims: make(map[string]*claim)}
}

func (c *Claims) expired(cl *claim, t time.Time) bool {
	return cl.recorded && c.Expired(cl.at, t)
}

// Len returns the number of live keys, claimed or recorded.
func (c *Claims) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.Now()
	n := 0
	for _, cl := range c.claims {
		if !c.expired(cl, t) {
			n++
		}
	}
	return n
}

// Claim claims in's key for lease (see store.Phased).
func (c *Claims) Claim(in store.Intent, lease time.Duration) (store.Claim, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.Now()
	cl, ok := c.claims[in.Key]
	if ok && c.expired(cl, t) {
		delete(c.claims, in.Key)
		ok = false
	}
	var held *store.Held
	if ok {
		held = &store.Held{Fingerprint: cl.fp[:], LeaseUntil: cl.leaseUntil, Recorded: cl.recorded, Value: cl.value}
	}
	res, err := store.Decide(in, held, t, lease, func() (bool, error) { return c.full(t), nil })
	switch {
	case err != nil || res.State != store.Owned:
		return res, err
	case res.TakenOver:
		cl.token, cl.leaseUntil = res.Token, res.LeaseUntil
	default:
		c.claims[in.Key] = &claim{fp: in.Fingerprint, token: res.Token, leaseUntil: res.LeaseUntil}
	}
	return res, nil
}

// full reports whether capacity live keys are held at t, deleting expired
// ones first if the table is full. Called with mu held.
func (c *Claims) full(t time.Time) bool {
	if len(c.claims) >= c.capacity {
		for k, old := range c.claims {
			if c.expired(old, t) {
				delete(c.claims, k)
			}
		}
	}
	return len(c.claims) >= c.capacity
}

// Complete records value for key if token still holds its claim.
func (c *Claims) Complete(key, token string, value int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.claims[key]
	if !ok || cl.recorded || cl.token != token {
		return store.ErrClaimLost
	}
	cl.recorded, cl.value, cl.at = true, value, c.Now()
	return nil
}

// Release deletes key's claim if token still holds it.
func (c *Claims) Release(key, token string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.claims[key]
	if !ok || cl.recorded || cl.token != token {
		return store.ErrClaimLost
	}
	delete(c.claims, key)
	return nil
}

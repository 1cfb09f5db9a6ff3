package effectserver

import (
	"fmt"

	"idemlab/internal/counterfile"
	"idemlab/internal/registry"
)

// Store names accepted by Config.Store.
const (
	StoreVolatile = "volatile"
	StoreDurable  = "durable"
)

// An Intent is one admitted request: its key ("" when unkeyed) and the
// fingerprint of its body.
type Intent struct {
	Key         string
	Fingerprint registry.Fingerprint
}

// A Record is a keyed result a store kept across restarts.
type Record struct {
	Key         string
	Fingerprint registry.Fingerprint
	Value       int64
}

// A Store applies the side effect and keeps whatever must outlive the
// process. The server claims keys in a registry.Registry whatever the store;
// the store decides where the effect and the key's result live.
//
// The volatile store (counterfile, results only in the registry) applies the
// effect durably and records nothing itself: completing the registry ticket
// after Apply is the record, so a restart forgets every key. A durable store
// runs the effect and records a keyed result in one transaction inside
// Apply, and returns what it kept from Recorded at start.
type Store interface {
	// Recorded returns the keyed results kept by earlier runs; the server
	// loads them into its registry at start.
	Recorded() ([]Record, error)

	// Apply runs the effect for one admitted intent (counter + 1) and
	// returns the counter value after it. afterEffect is called once the
	// effect is done and before the result is recorded (for a durable store:
	// after the effect statement, before the commit); if it returns an
	// error, Apply stops and returns that error without recording (a
	// durable store rolls back). A keyed result is recorded before Apply
	// returns if the store records results at all.
	Apply(in Intent, afterEffect func() error) (int64, error)

	// Close releases the store.
	Close() error
}

// openStore opens the store named name over the state folder dir.
func openStore(name, dir string) (Store, error) {
	switch name {
	case StoreVolatile:
		c, err := counterfile.Open(dir)
		if err != nil {
			return nil, err
		}
		return volatileStore{c}, nil
	case StoreDurable:
		return nil, fmt.Errorf("-store durable: not built yet (only volatile)")
	default:
		return nil, fmt.Errorf("-store %s: unknown store (want volatile or durable)", name)
	}
}

// volatileStore is the reference design: a durable counter file and an
// in-memory registry (the server's) holding the keys.
type volatileStore struct {
	counter *counterfile.Counter
}

func (volatileStore) Recorded() ([]Record, error) { return nil, nil }

func (s volatileStore) Apply(_ Intent, afterEffect func() error) (int64, error) {
	v, err := s.counter.Increment()
	if err != nil {
		return 0, fmt.Errorf("apply effect: %w", err)
	}
	if err := afterEffect(); err != nil {
		return 0, err
	}
	return v, nil
}

func (volatileStore) Close() error { return nil }

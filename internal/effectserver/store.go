package effectserver

import (
	"encoding/hex"
	"fmt"

	"idemlab/internal/counterfile"
	"idemlab/internal/durablestore"
	"idemlab/internal/registry"
)

// Store names accepted by Config.Store.
const (
	StoreVolatile = "volatile"
	StoreDurable  = "durable"
)

// An Intent is one admitted request: its key ("" when unkeyed) and the
// fingerprint of its body (its SHA-256).
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

// A Result is what Store.Apply did for an intent: the counter value to
// reply with, and whether that value replays a result the store had already
// recorded (no effect ran).
type Result struct {
	Value    int64
	Replayed bool
}

// A Store applies the side effect and keeps whatever must outlive the
// process. The server claims keys in a registry.Registry whatever the store;
// the store decides where the effect and the key's result live.
//
// The volatile store (counterfile, results only in the registry) applies the
// effect durably and records nothing itself: completing the registry ticket
// after Apply is the record, so a restart forgets every key. The durable
// store runs the effect and records a keyed result in one transaction inside
// Apply, and returns what it kept from Recorded at start. Because another
// process may share its database, the durable store also decides, inside
// that transaction, whether the key is already recorded (a replay, or
// registry.ErrConflict for another body) and whether a new key still fits
// (registry.ErrFull); the registry's answers are only this process's view.
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
	//
	// A store that records keys may instead answer from its record: a
	// Result with Replayed set (no effect, afterEffect not called),
	// registry.ErrConflict, or registry.ErrFull. Every applied effect is
	// also journaled with its body's fingerprint (see ReadState).
	Apply(in Intent, afterEffect func() error) (Result, error)

	// Close releases the store.
	Close() error
}

// openStore opens the store cfg names over its state folder.
func openStore(cfg Config) (Store, error) {
	switch cfg.Store {
	case StoreVolatile:
		c, err := counterfile.Open(cfg.StateDir)
		if err != nil {
			return nil, err
		}
		return volatileStore{c}, nil
	case StoreDurable:
		db, err := durablestore.Open(cfg.StateDir, cfg.Capacity)
		if err != nil {
			return nil, err
		}
		return durableStore{db}, nil
	default:
		return nil, fmt.Errorf("-store %s: unknown store (want volatile or durable)", cfg.Store)
	}
}

// volatileStore is the reference design: a durable counter file and an
// in-memory registry (the server's) holding the keys.
type volatileStore struct {
	counter *counterfile.Counter
}

func (volatileStore) Recorded() ([]Record, error) { return nil, nil }

// Apply journals the effect and increments the counter file (see
// counterfile for the order and what a crash between the two leaves), then
// calls afterEffect; the server's registry records the key.
func (s volatileStore) Apply(in Intent, afterEffect func() error) (Result, error) {
	v, err := s.counter.Increment(hex.EncodeToString(in.Fingerprint[:]))
	if err != nil {
		return Result{}, fmt.Errorf("apply effect: %w", err)
	}
	if err := afterEffect(); err != nil {
		return Result{}, err
	}
	return Result{Value: v}, nil
}

func (volatileStore) Close() error { return nil }

// durableStore keeps the counter, the keys and the journal in one SQLite
// database (see durablestore).
type durableStore struct {
	db *durablestore.Store
}

func (s durableStore) Recorded() ([]Record, error) {
	keys, err := s.db.Keys()
	if err != nil {
		return nil, err
	}
	recs := make([]Record, len(keys))
	for i, k := range keys {
		recs[i] = Record{Key: k.Key, Fingerprint: k.Fingerprint, Value: k.Value}
	}
	return recs, nil
}

func (s durableStore) Apply(in Intent, afterEffect func() error) (Result, error) {
	r, err := s.db.Apply(durablestore.Intent{Key: in.Key, Fingerprint: in.Fingerprint}, afterEffect)
	return Result{Value: r.Value, Replayed: r.Replayed}, err
}

func (s durableStore) Close() error { return s.db.Close() }

// Package store is the contract between the effect server and the places
// its side effect and its keys' results live: the Store interface, the
// values that cross it (Intent, Result, Record, Effect, State), the body
// Fingerprint, and the refusals a store or a key registry can answer with.
//
// Each store is a package beneath this one: volatile (a durable counter
// file; its keys live in the server's in-memory registry), durable
// (SQLite) and postgres (shared by replicas). Package store/open opens one
// by name and reads what it left behind; store/storetest is the contract
// every phased store passes. Implementations depend on this package, never
// the reverse, so a new store adds a package, not a copy of these types,
// and nothing outside this subtree knows which files a store keeps.
package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// A Fingerprint identifies a request's content: the SHA-256 of its exact body.
type Fingerprint [sha256.Size]byte

// FingerprintOf returns the fingerprint of body.
func FingerprintOf(body []byte) Fingerprint { return sha256.Sum256(body) }

// Hex returns the fingerprint as 64 lowercase hex digits, as journals keep it.
func (f Fingerprint) Hex() string { return hex.EncodeToString(f[:]) }

// Refusals: a store or a key registry answers an intent with one of these
// instead of a result. The server maps each to its reply (422, 429, 409).
var (
	ErrConflict   = errors.New("key already used with another request body")
	ErrFull       = errors.New("key registry full")
	ErrInProgress = errors.New("request with this key still in progress")
	// ErrUnavailable means the store could not be reached (a database
	// connection lost mid-request): nothing was recorded, the client may
	// retry (503).
	ErrUnavailable = errors.New("store unavailable")
)

// An Intent is one admitted request: its key ("" when unkeyed) and the
// fingerprint of its body.
type Intent struct {
	Key         string
	Fingerprint Fingerprint
}

// A Result is what Store.Apply did for an intent: the counter value to
// reply with, and whether that value replays a result the store had already
// recorded (no effect ran).
type Result struct {
	Value    int64
	Replayed bool
}

// A Record is a keyed result a store kept across restarts.
type Record struct {
	Key         string
	Fingerprint Fingerprint
	Value       int64
}

// An Effect is one applied effect, as the store's own journal keeps it: the
// counter value it produced and the SHA-256 (lowercase hex) of the request
// body. The journal is the lab's ground truth: counts of applied effects are
// taken from it, never from client replies.
type Effect struct {
	Value      int64  `json:"value"`
	BodySHA256 string `json:"body_sha256"`
}

// State is what a server left behind: the counter and its journal of
// applied effects, in the order applied (effect i produced value i+1).
type State struct {
	Counter int64    `json:"counter"`
	Effects []Effect `json:"effects"`
}

// A Place is where a store keeps its state: the state folder for the
// embedded stores (volatile, durable), a database for postgres.
type Place struct {
	Dir string // the state folder
	DSN string // the database (postgres only)
}

// A Store applies the side effect and keeps whatever must outlive the
// process. The server claims keys in its key registry whatever the store;
// the store decides where the effect and the key's result live.
//
// The volatile store (package volatile) applies the effect durably and records
// nothing itself: completing the registry ticket after Apply is the record,
// so a restart forgets every key. The durable store runs the effect and
// records a keyed result in one transaction inside Apply, and returns what
// it kept from Recorded at start. Because other processes may share a
// durable store, it also decides, inside that transaction, whether the key
// is already recorded (a replay, or ErrConflict for another body) and
// whether a new key still fits (ErrFull); the registry's answers are only
// this process's view.
type Store interface {
	// Recorded returns the keyed results kept by earlier runs; the server
	// loads them into its registry at start.
	Recorded() ([]Record, error)

	// Apply runs the effect for one admitted intent (counter + 1) and
	// returns the counter value after it. afterEffect is called once the
	// effect is done and before the result is recorded (for a transactional
	// store: after the effect statement, before the commit); if it returns
	// an error, Apply stops and returns that error without recording (a
	// transactional store rolls back). A keyed result is recorded before
	// Apply returns if the store records results at all.
	//
	// A store that records keys may instead answer from its record: a
	// Result with Replayed set (no effect, afterEffect not called),
	// ErrConflict, or ErrFull. Every applied effect is also journaled with
	// its body's fingerprint (see State).
	Apply(in Intent, afterEffect func() error) (Result, error)

	// Close releases the store.
	Close() error
}

// A Repairer is a store that repaired, when it opened, what a crash had
// left (the volatile store cuts a torn last journal record). Repairs says
// what it cut, one line each, for the server's log: nothing is removed
// without a word.
type Repairer interface {
	Repairs() []string
}

// Sync makes the file or folder at path durable (fsync): a file written, or
// a state folder whose entries a store changed.
func Sync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

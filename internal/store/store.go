// Package store is the contract between the effect server and its stores:
// the Store and Phased interfaces, the values that cross them, and the
// refusals a store or key registry answers with. Each store (volatile,
// durable, postgres) is a subpackage that depends on this one, never the
// reverse; store/open opens one by name.
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

// Refusals instead of a result; the server maps each to its reply.
var (
	ErrConflict   = errors.New("key already used with another request body")
	ErrFull       = errors.New("key registry full")
	ErrInProgress = errors.New("request with this key still in progress")
	// ErrUnavailable: the store could not be reached; nothing was
	// recorded, the client may retry (503).
	ErrUnavailable = errors.New("store unavailable")
)

// An Intent is one admitted request: its key ("" when unkeyed) and body.
type Intent struct {
	Key         string
	Fingerprint Fingerprint
}

// A Result is Store.Apply's answer; Replayed means no effect ran.
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

// An Effect is one applied effect as the store's journal keeps it. The
// journal is the lab's ground truth: effects are counted from it, never
// from client replies.
type Effect struct {
	Value      int64  `json:"value"`
	BodySHA256 string `json:"body_sha256"`
}

// State is what a server left behind; effect i produced value i+1.
type State struct {
	Counter int64    `json:"counter"`
	Effects []Effect `json:"effects"`
}

// A Place is where a store keeps its state.
type Place struct {
	Dir string // the state folder
	DSN string // the database (postgres only)
}

// A Store applies the side effect and keeps whatever must outlive the
// process. The volatile store records no keys (a restart forgets them); a
// durable store records a keyed result in the effect's transaction and,
// since other processes may share it, decides there whether the key is
// recorded or fits: the registry's answers are only this process's view.
type Store interface {
	// Recorded returns the keyed results kept by earlier runs.
	Recorded() ([]Record, error)

	// Apply runs the effect (counter + 1) and returns the counter after
	// it. afterEffect runs after the effect, before the result is
	// recorded (before the commit); its error stops Apply unrecorded. A
	// store that records keys may answer from its record instead: a
	// Replayed Result, ErrConflict or ErrFull.
	Apply(in Intent, afterEffect func() error) (Result, error)

	// Close releases the store.
	Close() error
}

// A Repairer is a store that repaired, when it opened, what a crash had
// left; Repairs says what it cut, one line each, for the server's log.
type Repairer interface {
	Repairs() []string
}

// Sync makes the file or folder at path durable (fsync).
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

package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"
)

// The contract of a store whose effect lives in another service
// (effectserver -downstream): no transaction spans both, so a keyed request
// commits a leased claim, calls downstream outside any transaction, then
// commits the result only if its claim still holds. A dead owner's claim
// is taken over by the next Claim once its lease ends.

// ErrClaimLost: the claim's lease ended and another request took the key.
var ErrClaimLost = errors.New("claim taken over by another owner after its lease")

// A ClaimState is what Phased.Claim found for a key.
type ClaimState int

// The claim states.
const (
	Owned    ClaimState = iota + 1 // the caller holds the claim and drives the call
	Recorded                       // a result is recorded for the same body: replay it
	Busy                           // another owner's lease holds the key
)

// A Claim is Phased.Claim's answer.
type Claim struct {
	State      ClaimState
	Value      int64     // Recorded
	Token      string    // Owned: Complete and Release take it
	TakenOver  bool      // Owned: the key held another owner's expired claim
	LeaseUntil time.Time // Owned: ours; Busy: the other owner's
}

// Phased is implemented by a store that keeps leased claims for the
// downstream mode. Each method is its own transaction.
type Phased interface {
	// Claim claims in's key for lease: a Claim, ErrConflict (another
	// body), ErrFull, or an error wrapping ErrUnavailable. A recorded key
	// past the key TTL is deleted and claimed anew.
	Claim(in Intent, lease time.Duration) (Claim, error)

	// Complete records value for key if token still holds its claim (else
	// ErrClaimLost); the key TTL runs from then.
	Complete(key, token string, value int64) error

	// Release deletes key's claim if token still holds it (else
	// ErrClaimLost): the downstream call is known not to have applied.
	Release(key, token string) error
}

// A Held is a key's claim as a store found it.
type Held struct {
	Fingerprint []byte
	LeaseUntil  time.Time
	Recorded    bool
	Value       int64
}

// Decide is every Phased.Claim's decision for in at t, given the key's
// claim (nil: none or expired) and full, asked only for a new key. An
// Owned answer carries the fresh token and lease for the store to write.
func Decide(in Intent, held *Held, t time.Time, lease time.Duration, full func() (bool, error)) (Claim, error) {
	owned := Claim{State: Owned, Token: NewToken(), LeaseUntil: t.Add(lease)}
	if held == nil {
		isFull, err := full()
		if err == nil && isFull {
			err = ErrFull
		}
		if err != nil {
			return Claim{}, err
		}
		return owned, nil
	}
	switch {
	case string(held.Fingerprint) != string(in.Fingerprint[:]):
		return Claim{}, ErrConflict
	case held.Recorded:
		return Claim{State: Recorded, Value: held.Value}, nil
	case t.Before(held.LeaseUntil):
		return Claim{State: Busy, LeaseUntil: held.LeaseUntil}, nil
	}
	owned.TakenOver = true
	return owned, nil
}

// Expiring is implemented by a store that can expire recorded keys: after
// SetKeyTTL(d), d > 0, a key recorded d ago is absent to every lookup and
// takes no capacity. Call it before the store is used.
type Expiring interface {
	SetKeyTTL(d time.Duration)

	// RecordedWithTimes is Recorded less expired keys, with their times,
	// so a registry loading them expires them when the store does.
	RecordedWithTimes() ([]TimedRecord, error)
}

// A TimedRecord is a Record and when it was recorded.
type TimedRecord struct {
	Record
	RecordedAt time.Time
}

// Records returns ts without their times.
func Records(ts []TimedRecord) []Record {
	if ts == nil {
		return nil
	}
	recs := make([]Record, len(ts))
	for i, t := range ts {
		recs[i] = t.Record
	}
	return recs
}

// NewToken returns a fresh claim token: 128 random bits in hex.
func NewToken() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

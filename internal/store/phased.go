package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"
)

// This file is the contract of a store whose effect lives in another
// service (effectserver -downstream): no transaction spans the store and
// that service, so a keyed request passes three recovery points, each its
// own transaction:
//
//	Claim     commit a claim holding a lease (key, fingerprint, token, lease end)
//	(call)    the effect: a call to the downstream service, outside any transaction
//	Complete  commit the result, only if the claim's token still holds
//
// A claim whose owner died is never stuck: once its lease ends, the next
// Claim of the key takes it over (a new token) and drives the call again.
// Whether that call is a duplicate is the downstream service's business:
// it replays when the key is forwarded to it.

// ErrClaimLost is returned by Complete and Release when the claim's token
// no longer holds: its lease ended and another request took the key over.
var ErrClaimLost = errors.New("claim taken over by another owner after its lease")

// A ClaimState is what Phased.Claim found for a key.
type ClaimState int

// The claim states.
const (
	// Owned: the caller holds the key's claim (new, or taken over from an
	// owner whose lease ended) and drives the downstream call.
	Owned ClaimState = iota + 1
	// Recorded: a result is recorded for the key and the same body: replay it.
	Recorded
	// Busy: another owner's claim holds the key until LeaseUntil.
	Busy
)

// A Claim is Phased.Claim's answer.
type Claim struct {
	State ClaimState
	// Value is the recorded result (Recorded).
	Value int64
	// Token names this owner's claim (Owned): Complete and Release take it.
	Token string
	// TakenOver says the key held an expired claim of another owner (Owned).
	TakenOver bool
	// LeaseUntil is when the claim's lease ends: ours (Owned) or the
	// other owner's (Busy).
	LeaseUntil time.Time
}

// Phased is implemented by a store that keeps claims with leases for the
// downstream mode (durable, postgres; the in-memory registry.Claims for
// the volatile store). Each method is its own transaction.
type Phased interface {
	// Claim claims in's key for lease. It returns a Claim (Owned, Recorded
	// or Busy), or ErrConflict (the key is claimed or recorded for another
	// body), ErrFull (a new key and capacity live keys held), or an error
	// wrapping ErrUnavailable. A recorded key older than the key TTL is
	// absent: it is deleted and claimed anew.
	Claim(in Intent, lease time.Duration) (Claim, error)

	// Complete records value as the result of key, if token still holds
	// its claim (else ErrClaimLost), and stamps the time it was recorded
	// (from which the key TTL runs).
	Complete(key, token string, value int64) error

	// Release deletes key's claim, if token still holds it (else
	// ErrClaimLost): the downstream call is known not to have applied.
	Release(key, token string) error
}

// A Held is a key's claim as a store found it: held for the body of
// Fingerprint, by its owner until LeaseUntil, or recorded with Value.
type Held struct {
	Fingerprint []byte
	LeaseUntil  time.Time
	Recorded    bool
	Value       int64
}

// Decide is the decision of every Phased.Claim: its answer for in at t,
// given the key's claim as the store found it (nil: none, or expired and
// removed) and full, asked only for a new key, saying whether capacity
// live keys are held. An Owned answer has a fresh token and a lease until
// t+lease, for the store to write: a new claim, or (TakenOver) the held
// claim's new token and lease.
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
// SetKeyTTL(d) with d > 0, a key recorded d or longer ago is absent to
// every lookup (a retry is a new effect) and takes no capacity. 0 (the
// default) keeps keys forever. Call it before the store is used.
type Expiring interface {
	SetKeyTTL(d time.Duration)

	// RecordedWithTimes returns what Recorded does, less the expired keys,
	// each with the time it was recorded, so that a registry loading them
	// expires them when the store does.
	RecordedWithTimes() ([]TimedRecord, error)
}

// A TimedRecord is a Record and when it was recorded.
type TimedRecord struct {
	Record
	RecordedAt time.Time
}

// Records returns the records of ts, without their times.
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

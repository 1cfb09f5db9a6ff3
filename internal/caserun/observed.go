package caserun

import (
	"cmp"
	"slices"

	"idemlab/internal/protocol"
)

// Observed is what the lab observed in one run of a case on a store, in
// the exact shape results.json records: only facts that are the same on
// every machine (no times, ports or PIDs).
type Observed struct {
	Case          string         `json:"case"`
	Store         protocol.Store `json:"store"`
	Counter       int64          `json:"counter"`
	ExitCodes     []int          `json:"exit_codes"`
	LedgerCounter *int64         `json:"ledger_counter,omitempty"` // the ledger's, in a case with one
	Calls         []Call         `json:"calls"`
}

// Call is one HTTP call and what came back.
type Call struct {
	Step     int              `json:"step"`
	Key      *string          `json:"key"`
	Fault    *string          `json:"fault"`
	Outcome  protocol.Outcome `json:"outcome"`
	Status   *int             `json:"status"`
	Body     *string          `json:"body"`
	Replayed *bool            `json:"replayed"`
	// RetryAfter is the reply's Retry-After, recorded on a target only (its
	// verdict asks for it on a 409).
	RetryAfter *string `json:"retry_after,omitempty"`
	// Replica is the replica the call went to, left out for replica 0
	// (every call of a one-server case) and for a concurrent group spread
	// across replicas, whose winner differs from run to run.
	Replica int `json:"replica,omitempty"`
}

// Compare orders calls canonically: by outcome, status, body, replayed
// (absent < false < true), so a concurrent group reads the same whatever
// order its replies arrived in.
func Compare(a, b Call) int {
	return cmp.Or(
		cmp.Compare(a.Outcome, b.Outcome),
		cmp.Compare(or(a.Status, -1), or(b.Status, -1)),
		cmp.Compare(or(a.Body, ""), or(b.Body, "")),
		cmp.Compare(replayedRank(a.Replayed), replayedRank(b.Replayed)),
	)
}

// or is *p, or none for nil.
func or[T any](p *T, none T) T {
	if p == nil {
		return none
	}
	return *p
}

// replayedRank orders a replay marker: absent, false, true.
func replayedRank(p *bool) int {
	if p == nil {
		return 0
	}
	if *p {
		return 2
	}
	return 1
}

// SortCanonical sorts a concurrent group in place by Compare, stably, and
// returns the permutation: perm[i] is the original index of the call now at i.
func SortCanonical(calls []Call) (perm []int) {
	perm = make([]int, len(calls))
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(i, j int) int { return Compare(calls[i], calls[j]) })
	sorted := make([]Call, len(calls))
	for i, p := range perm {
		sorted[i] = calls[p]
	}
	copy(calls, sorted)
	return perm
}

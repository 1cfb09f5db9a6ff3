// Package shard is the one home of how a run is split across machines
// (runner -shard K/N): which slice holds each of a run's cells, a case on
// a store or one trial of a case on a target. The runner picks its cells
// with it; the audit checks a slice against it and joins slices with it
// (audit -merge). It imports no lab package.
package shard

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// MaxN bounds the slices of one run: a CI job matrix of more machines
// than this is not what the lab is for.
const MaxN = 64

// A Slice is slice K of N (1-based); the zero Slice is the whole run.
type Slice struct{ K, N int }

// Whole reports whether s is the whole run, not a slice of it.
func (s Slice) Whole() bool { return s.N == 0 }

// String is s as the flag takes it: "K/N" ("" for the whole run).
func (s Slice) String() string {
	if s.Whole() {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.K, s.N)
}

// Parse reads "K/N", 1 <= K <= N <= MaxN.
func Parse(v string) (Slice, error) {
	k, n, ok := strings.Cut(v, "/")
	ki, errK := strconv.Atoi(k)
	ni, errN := strconv.Atoi(n)
	if !ok || errK != nil || errN != nil {
		return Slice{}, fmt.Errorf("%q: want K/N, slice K of N (such as 1/4)", v)
	}
	s := Slice{ki, ni}
	return s, s.Check()
}

// Check refuses a slice out of bounds.
func (s Slice) Check() error {
	switch {
	case s.Whole() && s.K == 0:
		return nil
	case s.N < 1 || s.N > MaxN:
		return fmt.Errorf("%s: N outside 1..%d", s, MaxN)
	case s.K < 1 || s.K > s.N:
		return fmt.Errorf("%s: K outside 1..N", s)
	}
	return nil
}

// HoldsStoreRun reports whether s holds the run of case c on store st.
func (s Slice) HoldsStoreRun(c, st string) bool {
	return s.Whole() || int(hash("store", c, st)%uint64(s.N)) == s.K-1
}

// Trials are the trials, 1-based in order, of case c on target t that s
// holds, of trials in all: a cell's trials go round the slices from a
// place its name picks, so that every slice gets its share of each cell
// and of the first trials. A case that cannot run on the target has one
// record, trial 1's.
func (s Slice) Trials(t, c string, trials int) []int {
	var out []int
	start := int(hash("target", t, c) % uint64(max(s.N, 1)))
	for k := 1; k <= trials; k++ {
		if s.Whole() || (start+k-1)%s.N == s.K-1 {
			out = append(out, k)
		}
	}
	return out
}

// hash is FNV-1a over the parts, each ended by a zero byte.
func hash(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

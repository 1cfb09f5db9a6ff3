package evidence

import (
	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/protocol"
)

// A Run is one finished (case, store) run: what it observed, and what
// varies (its details). The audit judges it.
type Run struct {
	Case   casefile.Case
	Store  protocol.Store
	Obs    caserun.Observed
	Detail caserun.Detail
}

// A Grid holds one Run per (case, store): cases in suite order, stores in
// evidence order, the order every evidence file lists runs in.
type Grid struct {
	Cases  []casefile.Case
	Stores []protocol.Store
	runs   []Run // row-major: case, then store
}

// NewGrid returns an empty grid for cases × stores.
func NewGrid(cases []casefile.Case, stores []protocol.Store) *Grid {
	return &Grid{Cases: cases, Stores: stores, runs: make([]Run, len(cases)*len(stores))}
}

// Set stores the run of case i on store j. Distinct cells may be set
// concurrently.
func (g *Grid) Set(i, j int, r Run) { g.runs[i*len(g.Stores)+j] = r }

// Runs returns every run in evidence order.
func (g *Grid) Runs() []Run { return g.runs }

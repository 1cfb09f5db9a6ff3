package casefile

import (
	"fmt"
	"slices"

	"idemlab/internal/results"
)

// Mismatches compares a run with this expectation and lists every
// difference, one line each; none means the run passed. The audit repeats
// this check with its own code: this copy only feeds the runner's progress
// lines and REPORT.md.
func (x Expectation) Mismatches(run results.Run) []string {
	var out []string
	if run.Counter != x.Counter {
		out = append(out, fmt.Sprintf("counter: expected %d, observed %d", x.Counter, run.Counter))
	}
	if want, got := x.LedgerCounter, run.LedgerCounter; (want == nil) != (got == nil) || want != nil && *want != *got {
		out = append(out, fmt.Sprintf("ledger counter: expected %s, observed %s", show(want), show(got)))
	}
	if !slices.Equal(run.ExitCodes, x.ExitCodes) {
		out = append(out, fmt.Sprintf("exit codes: expected %v, observed %v", x.ExitCodes, run.ExitCodes))
	}
	want := x.Expand()
	if len(run.Calls) != len(want) {
		out = append(out, fmt.Sprintf("calls: expected %d, observed %d", len(want), len(run.Calls)))
	}
	for i := range min(len(want), len(run.Calls)) {
		for _, m := range want[i].mismatches(run.Calls[i]) {
			out = append(out, fmt.Sprintf("call %d: %s", i, m))
		}
	}
	return out
}

func (e ExpectedCall) mismatches(c results.Call) []string {
	var out []string
	if c.Outcome != e.Outcome {
		out = append(out, fmt.Sprintf("outcome: expected %s, observed %s", e.Outcome, c.Outcome))
	}
	if e.Status != nil && (c.Status == nil || *c.Status != *e.Status) {
		out = append(out, fmt.Sprintf("status: expected %d, observed %s", *e.Status, show(c.Status)))
	}
	if e.Body != nil && (c.Body == nil || *c.Body != *e.Body) {
		out = append(out, fmt.Sprintf("body: expected %q, observed %s", *e.Body, show(c.Body)))
	}
	if e.Replayed != nil {
		ok := e.Replayed.Absent == (c.Replayed == nil) && (c.Replayed == nil || *c.Replayed == e.Replayed.Value)
		if !ok {
			out = append(out, fmt.Sprintf("replayed: expected %s, observed %s", e.Replayed, show(c.Replayed)))
		}
	}
	return out
}

// String shows an expected replayed header as results.json writes it.
func (r *Replayed) String() string {
	if r.Absent {
		return "null"
	}
	return fmt.Sprint(r.Value)
}

// show renders an observed optional value as results.json writes it.
func show[T any](p *T) string {
	if p == nil {
		return "null"
	}
	if s, ok := any(*p).(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(*p)
}

package audit

import (
	"fmt"
)

// checkExpectations compares every required run with its case's
// expectation: counter, exit codes (the exact list), the number of calls
// and every field the case file gives for each call.
func (a *auditor) checkExpectations(runs map[runKey]map[string]any) {
	for _, c := range a.cases {
		for _, s := range a.stores {
			exp, ok := c.Expect[s]
			run, ran := runs[runKey{c.Name, s}]
			if !ok || !ran {
				continue // reported by the run-set check
			}
			a.checkRun(c.Name, s, exp, run)
		}
	}
}

func (a *auditor) checkRun(caseName, store string, exp *Expectation, run map[string]any) {
	where := fmt.Sprintf("case %s, store %s", caseName, store)
	found, compared := mismatches(exp, run)
	a.report.Checks += compared
	for _, m := range found {
		at := where
		if m.call != nil {
			at = fmt.Sprintf("%s, call %d", where, *m.call)
		}
		a.fail(Failure{Check: CheckExpectation, Case: caseName, Store: store, Call: m.call,
			Field: m.field, Expected: m.expected, Observed: m.observed,
			Message: fmt.Sprintf("%s: %s", at, m)})
	}
}

// A mismatch is one way a run differs from its case's expectation.
type mismatch struct {
	call                      *int // nil: about the whole run
	field, expected, observed string
}

// String is the mismatch as REPORT.md and a failure line word it.
func (m mismatch) String() string {
	return fmt.Sprintf("%s: expected %s, observed %s", m.field, m.expected, m.observed)
}

// mismatches compares run with exp: the counter, the ledger's counter
// where either has one, the exit codes (the exact list), the number of
// calls and every field the case file gives for each call, and counts
// the comparisons. No mismatch means the run matches its case.
func mismatches(exp *Expectation, run map[string]any) (out []mismatch, compared int) {
	cmp := func(call *int, field string, want, got any) {
		compared++
		if w, g := render(want), render(got); w != g {
			out = append(out, mismatch{call, field, clipValue(w), clipValue(g)})
		}
	}
	cmp(nil, "counter", exp.Counter, run["counter"])
	if exp.Ledger != nil || run["ledger_counter"] != nil {
		cmp(nil, "ledger_counter", exp.Ledger, run["ledger_counter"])
	}
	exitCodes := exp.ExitCodes
	if exitCodes == nil {
		exitCodes = []any{}
	}
	cmp(nil, "exit_codes", exitCodes, run["exit_codes"])
	calls, _ := run["calls"].([]any)
	cmp(nil, "calls", len(exp.Calls), len(calls))
	for i, ec := range exp.Calls {
		if i >= len(calls) {
			break
		}
		observed, _ := calls[i].(map[string]any)
		for _, f := range ec.Fields {
			cmp(&i, f.Name, f.Value, observed[f.Name])
		}
	}
	return out, compared
}

// clipValue shortens a rendered value for a failure line: evidence can
// hold a string of megabytes, and a verdict line need not repeat it.
func clipValue(s string) string {
	const limit = 200
	if len(s) <= limit {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:limit], len(s))
}

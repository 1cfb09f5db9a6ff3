package audit

import (
	"fmt"
	"slices"
)

type runKey struct{ Case, Store string }

func (k runKey) String() string { return fmt.Sprintf("case %s, store %s", k.Case, k.Store) }

// checkRunSet checks that results.json holds exactly the required runs
// (cases × stores) in canonical order and that manifest.selection agrees
// with them. It returns the first run of each required (case, store).
func (a *auditor) checkRunSet(results map[string]any) map[runKey]map[string]any {
	arr, _ := results["runs"].([]any)
	a.report.Runs = len(arr)

	// The required runs, in canonical order.
	var want []runKey
	rank := map[runKey]int{}
	for _, c := range a.cases {
		for _, s := range a.stores {
			k := runKey{c.Name, s}
			rank[k] = len(want)
			want = append(want, k)
			if _, ok := c.Expect[s]; !ok {
				a.check()
				a.fail(Failure{Check: CheckRunSet, Case: c.Name, Store: s,
					Message: fmt.Sprintf("%s: %s has no expectation for this store", k, c.File)})
			}
		}
	}

	got := map[runKey]map[string]any{}
	var order []runKey // distinct runs as they appear
	for i, r := range arr {
		run, _ := r.(map[string]any)
		cname, _ := str(run, "case")
		store, _ := str(run, "store")
		k := runKey{cname, store}
		calls, _ := run["calls"].([]any)
		a.report.Calls += len(calls)
		if _, dup := got[k]; dup {
			a.fail(Failure{Check: CheckRunSet, Case: k.Case, Store: k.Store,
				Message: fmt.Sprintf("%s: duplicate run (runs[%d])", k, i)})
			continue
		}
		got[k] = run
		order = append(order, k)
		if _, ok := rank[k]; !ok {
			a.fail(Failure{Check: CheckRunSet, Case: k.Case, Store: k.Store,
				Message: fmt.Sprintf("%s: unexpected run (not among the required cases and stores)", k)})
		}
	}
	for _, k := range want {
		a.check()
		if _, ok := got[k]; !ok {
			a.fail(Failure{Check: CheckRunSet, Case: k.Case, Store: k.Store,
				Message: fmt.Sprintf("%s: missing run", k)})
		}
	}

	// Canonical order: case-file order, then store order.
	a.check()
	var prev *runKey
	for _, k := range order {
		r, ok := rank[k]
		if !ok {
			continue
		}
		if prev != nil && r < rank[*prev] {
			a.fail(Failure{Check: CheckRunSet, Case: k.Case, Store: k.Store,
				Message: fmt.Sprintf("%s: out of order (after %s; runs go in case-file order, then store order)", k, *prev)})
			continue
		}
		k := k
		prev = &k
	}

	// manifest.selection lists the cases and stores the runs cover.
	sel, _ := a.manifest["selection"].(map[string]any)
	var runCases, runStores []string
	for _, k := range order {
		if !slices.Contains(runCases, k.Case) {
			runCases = append(runCases, k.Case)
		}
		if !slices.Contains(runStores, k.Store) {
			runStores = append(runStores, k.Store)
		}
	}
	runStores = orderStores(runStores)
	for _, f := range []struct {
		field string
		runs  []string
	}{{"cases", runCases}, {"stores", runStores}} {
		a.check()
		listed := stringList(sel, f.field)
		if !slices.Equal(listed, f.runs) {
			a.fail(Failure{Check: CheckRunSet, Field: "selection." + f.field,
				Expected: render(toAny(f.runs)), Observed: render(toAny(listed)),
				Message: fmt.Sprintf("manifest.json: selection.%s: expected %s (as in results.json), observed %s",
					f.field, render(toAny(f.runs)), render(toAny(listed)))})
		}
	}

	first := map[runKey]map[string]any{}
	for k, run := range got {
		if _, ok := rank[k]; ok {
			first[k] = run
		}
	}
	return first
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

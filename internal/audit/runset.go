package audit

import (
	"fmt"
	"idemlab/internal/audit/shard"
	"slices"
	"strings"
)

type runKey struct{ Case, Store string }

func (k runKey) String() string { return fmt.Sprintf("case %s, store %s", k.Case, k.Store) }

// selectRuns reads manifest.selection: the cases (in case-file order),
// stores (in store order) and targets, each once, whose runs must be
// present; -case and -store narrow the runs checked in depth.
func (a *auditor) selectRuns() {
	a.check()
	a.readSlice()
	a.selectCases(a.selected("cases"))
	a.selectStoresAndTargets(a.selected("stores"), a.selected("targets"))
	switch ran := len(a.selStores) > 0 || len(a.selTargets) > 0; {
	case len(a.selCases) == 0 && len(a.selStores) > 0:
		a.failf(CheckRunSet, "manifest.json: selection: cases and stores must both be empty or both be set")
	case len(a.selCases) == 0 && len(a.selTargets) > 0:
		a.failf(CheckRunSet, "manifest.json: selection: targets without cases (a target runs the selected cases)")
	case len(a.selCases) > 0 && !ran:
		a.failf(CheckRunSet, "manifest.json: selection: cases, but no store and no target to run them on")
	}
	a.narrow()
	if len(a.selCases) == 0 && len(a.selected("experiments")) == 0 {
		a.failf(CheckRunSet, "manifest.json: selection: selects no case and no experiment: the evidence claims nothing")
	}
	a.report.Cases, a.report.Stores = len(a.cases), len(a.stores)
	a.noteSubset()
}

// readSlice reads manifest.shard: a folder that holds slice K of N of a
// run (runner -shard) holds exactly the cells internal/audit/shard gives
// it, and is judged once the slices are merged (audit -merge): it derives
// no verdict and renders nothing.
func (a *auditor) readSlice() {
	m := mapOf(a.manifest, "shard")
	if m == nil {
		return
	}
	a.check()
	s := shard.Slice{K: int(number(m["k"])), N: int(number(m["n"]))}
	if err := s.Check(); err != nil || s.Whole() {
		a.manifestFail("shard", "%s: not a slice (K/N, 1 <= K <= N <= %d)", render(m), shard.MaxN)
		return
	}
	a.slice = s
	a.report.Shard = s.String()
	a.report.Subset = append(a.report.Subset, fmt.Sprintf("slice %s of a run: its cells only", s))
	a.note(fmt.Sprintf("slice %s of a run (runner -shard): its cells were checked in depth; the verdicts and the reports are derived once the %d slices are merged (audit -merge)", s, s.N))
}

// selected is manifest.selection's list (cases, stores, targets or
// experiments), as recorded.
func (a *auditor) selected(list string) []string {
	return stringList(mapOf(a.manifest, "selection"), list)
}

// selectCases reads selection.cases into selCases.
func (a *auditor) selectCases(names []string) {
	last := -1
	for _, n := range names {
		i := slices.IndexFunc(a.allCases, func(c *Case) bool { return c.Name == n })
		switch {
		case i < 0:
			a.failf(CheckRunSet, "manifest.json: selection.cases: %q is not the name of a case file in cases/", n)
			continue
		case slices.Contains(a.selCases, a.allCases[i]):
			a.failf(CheckRunSet, "manifest.json: selection.cases: %q listed twice", n)
			continue
		case i < last:
			a.failf(CheckRunSet, "manifest.json: selection.cases: %q out of case-file order", n)
		}
		last = i
		a.selCases = append(a.selCases, a.allCases[i])
	}
}

// selectStoresAndTargets reads selection.stores and selection.targets.
func (a *auditor) selectStoresAndTargets(stores, targets []string) {
	known := knownStores(a.allCases)
	for _, s := range stores {
		switch {
		case !slices.Contains(known, s):
			a.failf(CheckRunSet, "manifest.json: selection.stores: %q is not a known store", s)
		case slices.Contains(a.selStores, s):
			a.failf(CheckRunSet, "manifest.json: selection.stores: %q listed twice", s)
		default:
			a.selStores = append(a.selStores, s)
		}
	}
	if !slices.Equal(orderStores(a.selStores), a.selStores) {
		a.failf(CheckRunSet, "manifest.json: selection.stores: not in store order (%s)", strings.Join(StoreOrder, ", "))
	}
	for _, n := range targets {
		if slices.Contains(a.selTargets, n) {
			a.failf(CheckRunSet, "manifest.json: selection.targets: %q listed twice", n)
			continue
		}
		a.selTargets = append(a.selTargets, n)
	}
}

// narrow sets what is checked in depth: the selection, narrowed by -case
// and -store; a narrowing outside the selection still requires its runs.
func (a *auditor) narrow() {
	a.cases, a.stores = a.selCases, a.selStores
	if n := a.opts.Case; n != "" {
		a.cases = []*Case{a.allCases[slices.IndexFunc(a.allCases, func(c *Case) bool { return c.Name == n })]}
		a.report.Subset = append(a.report.Subset, "checked: -case "+n)
	}
	if s := a.opts.Store; s != "" {
		a.stores = []string{s}
		a.report.Subset = append(a.report.Subset, "checked: -store "+s)
	}
	if a.opts.Case != "" && len(a.stores) == 0 && len(a.selTargets) == 0 {
		a.stores = a.cases[0].Stores() // -case in a folder that selects no stores nor targets
	}
	if len(a.cases) == 0 {
		a.stores = nil // an experiment-only folder: -store has nothing to narrow
	}
}

// noteSubset names, for the PASS line, what the selection leaves out.
func (a *auditor) noteSubset() {
	if len(a.selCases) > 0 && len(a.selCases) < len(a.allCases) {
		names := make([]string, len(a.selCases))
		for i, c := range a.selCases {
			names[i] = c.Name
		}
		a.report.Subset = append(a.report.Subset, "cases: "+strings.Join(names, ", ")+" only")
	}
	if len(a.selStores) == 0 && len(a.selTargets) > 0 {
		a.report.Subset = append(a.report.Subset, "stores: none (runs on targets only)")
	}
	var all []string
	for _, c := range a.selCases {
		for _, s := range c.Stores() {
			if !slices.Contains(all, s) {
				all = append(all, s)
			}
		}
	}
	if len(a.selStores) > 0 && len(a.selStores) < len(all) {
		a.report.Subset = append(a.report.Subset, "stores: "+strings.Join(a.selStores, ", ")+" only")
	}
	a.noteTargetSubset()
}

// noteTargetSubset names, for the PASS line, the targets the checkout
// ships (targets/NAME/target.json) that a selection with cases leaves
// out, as stores': a target dropped from the selection is said, never
// only counted.
func (a *auditor) noteTargetSubset() {
	if len(a.selCases) == 0 {
		return // an experiment-only folder: no case ran anywhere
	}
	shipped := a.shippedTargets()
	left := slices.DeleteFunc(slices.Clone(shipped), func(n string) bool { return slices.Contains(a.selTargets, n) })
	switch {
	case len(left) == 0:
	case len(a.selTargets) == 0:
		a.report.Subset = append(a.report.Subset, "targets: none (runs on stores only)")
	default:
		a.report.Subset = append(a.report.Subset, "targets: "+strings.Join(a.selTargets, ", ")+" only")
	}
}

// required returns the runs results.json must hold, in canonical order,
// and those checked in depth.
func (a *auditor) required() (want []runKey, deep map[runKey]bool) {
	deep = map[runKey]bool{}
	for _, c := range a.allCases {
		for _, s := range knownStores(a.allCases) {
			k := runKey{c.Name, s}
			held := a.slice.HoldsStoreRun(c.Name, s)
			inSel := held && slices.Contains(a.selCases, c) && slices.Contains(a.selStores, s)
			inDeep := held && slices.Contains(a.cases, c) && slices.Contains(a.stores, s)
			if inSel || inDeep {
				want = append(want, k)
			}
			if inDeep {
				deep[k] = true
			}
		}
	}
	return want, deep
}

// checkRunSet checks that results.json holds exactly the required runs,
// in order, each with an expectation; it returns those checked in depth.
func (a *auditor) checkRunSet(results map[string]any) map[runKey]map[string]any {
	fail := func(k runKey, format string, args ...any) {
		a.fail(Failure{Check: CheckRunSet, Case: k.Case, Store: k.Store, Message: fmt.Sprintf("%s: "+format, append([]any{k}, args...)...)})
	}
	arr, _ := results["runs"].([]any)
	want, deep := a.required()
	rank := map[runKey]int{}
	for i, k := range want {
		rank[k] = i
	}
	for _, k := range want {
		a.check()
		if i := slices.IndexFunc(a.allCases, func(c *Case) bool { return c.Name == k.Case }); i >= 0 && a.allCases[i].Expect[k.Store] == nil {
			fail(k, "%s has no expectation for this store", a.allCases[i].File)
		}
	}
	got, out := map[runKey]map[string]any{}, map[runKey]map[string]any{}
	var order []runKey // distinct runs as they appear
	for i, r := range arr {
		run, _ := r.(map[string]any)
		k := runKeyOf(run)
		calls, _ := run["calls"].([]any)
		switch _, dup := got[k]; {
		case dup:
			fail(k, "duplicate run (runs[%d])", i)
			continue
		case !slices.Contains(want, k) && !a.slice.Whole():
			fail(k, "unexpected run (not one of manifest.selection's that slice %s holds)", a.slice)
		case !slices.Contains(want, k):
			fail(k, "unexpected run (not in manifest.selection)")
		case deep[k]:
			a.report.Runs++
			a.report.Calls += len(calls)
			out[k] = run
		}
		got[k] = run
		order = append(order, k)
	}
	for _, k := range want {
		a.check()
		if _, ok := got[k]; !ok {
			fail(k, "missing run")
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
			fail(k, "out of order (after %s; runs go in case-file order, then store order)", *prev)
			continue
		}
		prev = &k
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

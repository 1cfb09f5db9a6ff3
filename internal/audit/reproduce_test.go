package audit

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Ensure a recorded count is "far" exactly outside [min/4 − 5, 4·max + 5]
// of its re-observations, and never without one.
func TestFar(t *testing.T) {
	for _, tt := range []struct {
		recorded int64
		again    []int64
		want     bool
	}{
		{1, []int64{121}, true},        // a forged "duplicated 1" beside re-observed tens
		{0, []int64{25}, true},         // a forged "0 duplicates": 25/4 − 5 = 1.25
		{0, []int64{25, 9}, false},     // 9/4 − 5 < 0: a small count is never flagged for 0
		{50, []int64{129, 151}, false}, // the spread measured between honest runs
		{33, []int64{151}, false},      // 151/4 − 5 = 32.75
		{32, []int64{151}, true},
		{609, []int64{151}, false}, // 4·151 + 5
		{610, []int64{151}, true},
		{0, []int64{0, 0}, false},
		{5, []int64{0}, false}, // the slack: a few where none were seen
		{6, []int64{0}, true},
		{7, nil, false},
	} {
		if got := far(tt.recorded, tt.again); got != tt.want {
			t.Errorf("far(%d, %v) = %v, want %v", tt.recorded, tt.again, got, tt.want)
		}
	}
}

// Ensure the runner invocations -reproduce makes are the recorded
// selection and knobs: run 1 the whole selection, later runs one per
// non-deterministic experiment; and that a selection no invocation makes
// is refused.
func TestReproducePlan(t *testing.T) {
	const fixture = "../../cmd/audit/testdata/fixture"
	for _, tt := range []struct {
		folder string
		full   string
		extra  []string
	}{
		{"evidence", "-store all -target effectserver-volatile -target express-idempotency -trials=1", nil},
		{"retries", "-experiment retries", []string{"-experiment retries"}},
		{"jitter", "-experiment jitter", nil},
		// A folder from before chaos trials: one trial on each target.
		{"chaos", "-experiment chaos -store all -target effectserver-durable -target express-idempotency -clients=2 -duration=1s -chaos-trials=1",
			[]string{"-experiment chaos -store all -target effectserver-durable -target express-idempotency -clients=2 -duration=1s -chaos-trials=1"}},
		{"signed", "-case keyed_lost_reply -store volatile", nil},
	} {
		p, err := readPlanner(fixture, fixture+"/"+tt.folder)
		if err != nil {
			t.Fatalf("%s: %v", tt.folder, err)
		}
		full, err := p.fullRun()
		if err != nil {
			t.Fatalf("%s: %v", tt.folder, err)
		}
		extra := p.laterRuns()
		var got []string
		for _, e := range extra {
			got = append(got, strings.Join(e, " "))
		}
		if g := strings.Join(full, " "); g != tt.full || !slices.Equal(got, tt.extra) {
			t.Errorf("%s: plan = %q, %q; want %q, %q", tt.folder, g, got, tt.full, tt.extra)
		}
	}
}

// Ensure the planner maps each selection to the runner's flags, knowing
// its defaults, and refuses one no invocation makes.
func TestPlannerSelections(t *testing.T) {
	all3 := []string{"retries", "jitter", "chaos"}
	base := planner{allCases: []string{"a", "b"}, shipped: []string{"t1", "t2"}}
	for _, tt := range []struct {
		name string
		edit func(*planner)
		want string // run 1, or the error's text
	}{
		{"plain", func(p *planner) {
			p.cases, p.stores, p.targets, p.exps = p.allCases, StoreOrder, p.shipped, all3
		}, ""},
		{"every store, no target, no experiment", func(p *planner) { p.cases, p.stores = p.allCases, StoreOrder }, "-store all -experiment none"},
		{"one case list", func(p *planner) { p.cases, p.stores = []string{"b"}, []string{"durable"} }, "-case b -store durable"},
		{"targets only", func(p *planner) { p.cases, p.targets = p.allCases, []string{"t2"} }, "-target t2"},
		{"a store and a target", func(p *planner) { p.cases, p.stores, p.targets = p.allCases, []string{"postgres"}, []string{"t1"} }, "-store postgres -target t1"},
		{"unsafe", func(p *planner) { p.unsafe, p.cases, p.stores = "no-lock", p.allCases, []string{"volatile"} }, "-unsafe-registry no-lock -store volatile"},
		{"knobs", func(p *planner) { p.exps, p.flags = []string{"jitter"}, []string{"-duration=1s"} }, "-experiment jitter -duration=1s"},
		{"two stores", func(p *planner) { p.cases, p.stores = p.allCases, []string{"volatile", "durable"} }, "not one runner invocation"},
		{"no case, two experiments", func(p *planner) { p.exps = []string{"retries", "chaos"} }, "not one runner invocation"},
		{"a case list with experiments", func(p *planner) { p.cases, p.stores, p.exps = []string{"a"}, StoreOrder, all3 }, "cases with experiments"},
		{"cases nowhere", func(p *planner) { p.cases = p.allCases }, "cases on no store and no target"},
	} {
		p := base
		tt.edit(&p)
		full, err := p.fullRun()
		got := strings.Join(full, " ")
		if err != nil {
			got = err.Error()
			if !errors.Is(err, ErrCannotReproduce) {
				t.Errorf("%s: error %v is not ErrCannotReproduce", tt.name, err)
			}
		}
		if !strings.Contains(got, tt.want) || (err == nil && got != tt.want) {
			t.Errorf("%s: run 1 = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// Ensure every JSON document -reproduce reads from a folder fits its caps
// in the committed evidence: a cap too small for a grown matrix (verdicts.json
// on 13 targets once took the manifest's 1,000 objects) fails only there.
func TestReproduceReadsCommittedEvidence(t *testing.T) {
	dir := filepath.Join("..", "..", "evidence")
	for name := range jsonCaps {
		if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
			continue // a selection may leave a document out
		}
		if _, err := readJSONFile(dir, name, capOf(name)); err != nil {
			t.Errorf("read %s: %v", name, err)
		}
	}
	if _, ok := jsonCaps[VerdictsFile]; !ok {
		t.Errorf("%s has no JSON caps of its own", VerdictsFile)
	}
}

// Ensure the chaos claims are held again only on the re-runs that ran
// chaos: every folder holds verdicts.json, and a retries-only re-run's
// has no chaos run in it (it once made every store's promise "not held
// again" on two of five observations).
func TestAgainChaosOnlyWhereChaosRan(t *testing.T) {
	rec := filepath.Join("..", "..", "evidence")
	withChaos, retriesOnly := t.TempDir(), t.TempDir()
	for _, name := range []string{ChaosFile, VerdictsFile} {
		b, err := os.ReadFile(filepath.Join(rec, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(withChaos, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(retriesOnly, VerdictsFile), []byte(`{"schema_version": 1, "stores": [], "targets": [], "chaos": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var r Reproduction
	if err := r.againChaos(rec, []string{withChaos, retriesOnly}); err != nil {
		t.Fatal(err)
	}
	if len(r.Claims) == 0 {
		t.Fatal("no chaos claim held again: the committed evidence promises some")
	}
	for _, c := range r.Claims {
		if len(c.Held) != 1 {
			t.Errorf("%s: %d observations, want 1 (the one re-run that ran chaos)", c.Claim, len(c.Held))
		}
	}
	if len(r.Findings) > 0 {
		t.Errorf("findings on the recorded evidence's own verdicts: %v", r.Findings)
	}
}

// Ensure a target's chaos trials, each a run of chaos.json, are one
// -target of the re-runs, which run the recorded -chaos-trials.
func TestReproducePlanChaosTrials(t *testing.T) {
	const root = "../../cmd/audit/testdata/fixture"
	dir := t.TempDir()
	write := func(name, doc string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("manifest.json", `{"selection": {"cases": [], "stores": [], "targets": [], "experiments": ["chaos"]}, "flags": {"chaos-trials": "2"}}`)
	write(ChaosFile, `{"runs": [{"store": "durable", "target": ""}, {"store": "", "target": "express-idempotency", "trial": 1}, {"store": "", "target": "express-idempotency", "trial": 2}]}`)
	p, err := readPlanner(root, dir)
	if err != nil {
		t.Fatal(err)
	}
	full, err := p.fullRun()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(full, " "), "-experiment chaos -store durable -target express-idempotency -chaos-trials=2"; got != want {
		t.Errorf("run 1 = %q, want %q", got, want)
	}
}

package audit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Ensure a recorded rate on a target is implausible beside a re-run's
// exactly when their Wilson 95 % intervals do not overlap, worked out by
// hand: 0/10 (0–27.8 %) against 10/10 (72.2–100 %) is, 3/10 (10.8–60.3 %)
// against 7/10 (39.7–89.2 %) is a race and is not, and a case recorded as
// run that the re-run did not re-observe is a finding.
func TestAgainTargets(t *testing.T) {
	cell := func(cs string, trials int, tally safetyTally, rates ...ruleRate) targetRunVerdict {
		v := targetRunVerdict{Case: cs, Trials: trials, Tally: tally, Rates: rates}
		v.Safety = "pass"
		if tally.Violation > 0 {
			v.Safety = "violation"
		}
		return v
	}
	write := func(dir string, runs []targetRunVerdict, skipped string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		doc := verdictsDoc{Targets: []targetVerdict{{Target: "lib", Skipped: skipped, Runs: runs}}, Stores: []storeVerdict{}, Chaos: []ChaosVerdict{}}
		for _, f := range []struct {
			name string
			v    any
		}{{VerdictsFile, doc}, {"manifest.json", map[string]any{"selection": map[string]any{"targets": []string{"lib"}}}}} {
			data, err := json.Marshal(f.v)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f.name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	root := t.TempDir()
	recorded, rerun := filepath.Join(root, "recorded"), filepath.Join(root, "run-1-0", "evidence")
	write(recorded, []targetRunVerdict{
		cell("forged_pass", 10, safetyTally{Pass: 10}),
		cell("racy", 10, safetyTally{Pass: 7, Violation: 3}, ruleRate{Rule: "stuck_key", Trials: 3, Of: 10}),
		cell("gone", 10, safetyTally{Pass: 10}),
	}, "")
	write(rerun, []targetRunVerdict{
		cell("forged_pass", 10, safetyTally{Violation: 10}, ruleRate{Rule: "duplicate_effect", Trials: 10, Of: 10}),
		cell("racy", 10, safetyTally{Pass: 3, Violation: 7}, ruleRate{Rule: "stuck_key", Trials: 7, Of: 10}),
		{Case: "gone", NotRun: "the case runs 2 replicas"},
	}, "")
	var r Reproduction
	if err := r.againTargets(recorded, []string{rerun}); err != nil {
		t.Fatal(err)
	}
	implausible := map[string]bool{}
	for _, ra := range r.Rates {
		implausible[ra.Case+" "+ra.What] = ra.Implausible
	}
	want := map[string]bool{
		"forged_pass pass": true, "forged_pass violation": true, "forged_pass rule duplicate_effect": true,
		"racy pass": false, "racy violation": false, "racy rule stuck_key": false,
	}
	for k, w := range want {
		if got, ok := implausible[k]; !ok || got != w {
			t.Errorf("%s: implausible %v (listed %v), want %v", k, got, ok, w)
		}
	}
	findings := strings.Join(r.Findings, "\n")
	for _, w := range []string{
		"target lib, case forged_pass: violation recorded in 0/10 trials (Wilson 95 %: 0–27.8 %), re-observed in 10/10 (72.2–100 %): the intervals do not overlap",
		"target lib, case gone: recorded as run, but the re-run in run-1-0 did not re-observe it (it did not run there)",
	} {
		if !strings.Contains(findings, w) {
			t.Errorf("findings =\n%s\nwant %q", findings, w)
		}
	}
	if strings.Contains(findings, "case racy") {
		t.Errorf("a race re-observed at another plausible rate is flagged:\n%s", findings)
	}
}

// Ensure what a target did under chaos fails again only when no re-run
// agrees on whether a rule fired and its rate over intents is implausible
// beside the re-runs' pooled, worked out by hand: 0 of 72 (Wilson 95 %:
// 0–5.1 %) beside 5 of 211 (1.0–5.4 %) overlaps, beside 42 of 216
// (14.7–25.2 %) does not; 1 of 70 (0.3–7.7 %) beside 0 of 210 (0–1.8 %)
// overlaps; 9 of 72 (6.7–22.1 %) beside it does not.
func TestTargetChaosAgain(t *testing.T) {
	type run struct{ rule, intents int }
	verdict := func(r run) map[string]any {
		var rules []any
		for _, rule := range chaosRules {
			n := 0
			if rule == "duplicate" {
				n = r.rule
			}
			rules = append(rules, map[string]any{"rule": rule, "promised": false, "count": json.Number(strconv.Itoa(n))})
		}
		return map[string]any{"rules": rules, "counts": map[string]any{"intents": json.Number(strconv.Itoa(r.intents))}}
	}
	const s = "target lib"
	for _, tc := range []struct {
		name     string
		recorded run
		again    []run
		verdict  string // how the claim is printed
		finding  string // "" for none
	}{
		{"some recorded, one re-run of two agrees", run{15, 70}, []run{{2, 70}, {0, 70}},
			"held again (a target's race: on one at least) 1/2: chaos target lib: duplicate happens (15 recorded)", ""},
		{"none recorded, none re-observed", run{0, 72}, []run{{0, 70}, {0, 71}},
			"held again (a target's race: on one at least) 2/2: chaos target lib: no duplicate", ""},
		{"none recorded, a rare race on every re-run", run{0, 72}, []run{{2, 70}, {1, 71}, {2, 70}},
			"not held again, at a plausible rate (0 of 72 intents | 5 of 211) 0/3: chaos target lib: no duplicate", ""},
		{"none recorded, many on every re-run (a forgery)", run{0, 72}, []run{{13, 72}, {15, 72}, {14, 72}},
			"NOT HELD AGAIN 0/3: chaos target lib: no duplicate",
			"chaos target lib: no duplicate: held on no re-observation (0 of 3), and implausible: 0 of 72 intents (Wilson 95 %: 0–5.1 %), re-observed in 42 of 216 (14.7–25.2 %)"},
		{"one recorded, none re-observed", run{1, 70}, []run{{0, 70}, {0, 70}, {0, 70}},
			"not held again, at a plausible rate (1 of 70 intents | 0 of 210) 0/3: chaos target lib: duplicate happens (1 recorded)", ""},
		{"many recorded, none re-observed (a forgery)", run{9, 72}, []run{{0, 70}, {0, 70}, {0, 70}},
			"NOT HELD AGAIN 0/3: chaos target lib: duplicate happens (9 recorded)",
			"chaos target lib: duplicate happens (9 recorded): held on no re-observation (0 of 3), and implausible: 9 of 72 intents (Wilson 95 %: 6.7–22.1 %), re-observed in 0 of 210 (0–1.8 %)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var again []map[string]map[string]any
			for _, a := range tc.again {
				again = append(again, map[string]map[string]any{s: verdict(a)})
			}
			r := Reproduction{Pass: true, Audit: &Report{Pass: true}}
			r.targetChaosAgain(s, verdict(tc.recorded), again)
			var out strings.Builder
			if err := r.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "  "+tc.verdict+"\n") {
				t.Errorf("output:\n%s\nwant the line %q", out.String(), tc.verdict)
			}
			var want []string
			if tc.finding != "" {
				want = []string{tc.finding}
			}
			if strings.Join(r.Findings, "\n") != strings.Join(want, "\n") {
				t.Errorf("findings %q, want %q", r.Findings, want)
			}
		})
	}
}

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
// exactly when their Wilson 99 % intervals do not overlap, worked out by
// hand: 0/10 (0–39.9 %) against 10/10 (60.1–100 %) is; 3/10 against 7/10
// (8–68 % and 32–92 %) is a race and is not, nor is 4/10 (12.8–75.2 %)
// against 10/10, which an honest recording and a local CI's re-run
// of express-idempotency-redis's concurrent duplicate on two replicas
// showed (apart at 95 %: 16.8–68.7 % and 72.2–100 %); and a case recorded
// as run that the re-run did not re-observe is a finding.
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
		cell("loaded", 10, safetyTally{Pass: 6, Violation: 4}, ruleRate{Rule: "duplicate_effect", Trials: 4, Of: 10}),
	}, "")
	write(rerun, []targetRunVerdict{
		cell("forged_pass", 10, safetyTally{Violation: 10}, ruleRate{Rule: "duplicate_effect", Trials: 10, Of: 10}),
		cell("racy", 10, safetyTally{Pass: 3, Violation: 7}, ruleRate{Rule: "stuck_key", Trials: 7, Of: 10}),
		{Case: "gone", NotRun: "the case runs 2 replicas"},
		cell("loaded", 10, safetyTally{Violation: 10}, ruleRate{Rule: "duplicate_effect", Trials: 10, Of: 10}),
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
		"loaded pass": false, "loaded violation": false, "loaded rule duplicate_effect": false,
	}
	for k, w := range want {
		if got, ok := implausible[k]; !ok || got != w {
			t.Errorf("%s: implausible %v (listed %v), want %v", k, got, ok, w)
		}
	}
	findings := strings.Join(r.Findings, "\n")
	for _, w := range []string{
		"target lib, case forged_pass: violation recorded in 0/10 trials (Wilson 99 %: 0–39.9 %), re-observed in 10/10 (60.1–100 %): the intervals do not overlap",
		"target lib, case gone: recorded as run, but the re-run in run-1-0 did not re-observe it (it did not run there)",
	} {
		if !strings.Contains(findings, w) {
			t.Errorf("findings =\n%s\nwant %q", findings, w)
		}
	}
	if strings.Contains(findings, "case racy") || strings.Contains(findings, "case loaded") {
		t.Errorf("a race re-observed at another plausible rate is flagged:\n%s", findings)
	}
}

// Ensure what a target did under chaos fails again only when the trials
// in which a rule fired, recorded and re-observed (pooled), are rates
// whose Wilson 95 % intervals do not overlap, worked out by hand: 1 of 3
// (6.1–79.2 %) beside 0 of 9 (0–29.9 %) overlaps, the race an honest run
// records and its re-runs miss, which a rate over intents judged
// implausible (4 of 108 intents beside 0 of 364); 3 of 3 (43.8–100 %)
// beside 0 of 9 does not, nor beside 1 of 9 (2–43.5 %); 0 of 3 (0–56.2 %)
// beside 9 of 9 (70.1–100 %) does not, beside 7 of 9 (45.3–93.7 %) does.
func TestTargetChaosAgain(t *testing.T) {
	verdict := func(n int) map[string]any {
		var rules []any
		for _, rule := range chaosRules {
			count := 0
			if rule == "stuck" {
				count = n
			}
			rules = append(rules, map[string]any{"rule": rule, "promised": true, "count": json.Number(strconv.Itoa(count))})
		}
		return map[string]any{"rules": rules}
	}
	trials := func(counts ...int) []map[string]any {
		var out []map[string]any
		for _, n := range counts {
			out = append(out, verdict(n))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		recorded []map[string]any
		again    [][]map[string]any
		verdict  string // how the claim is printed
		finding  string // "" for none
	}{
		{"in one trial of three, in none of nine again", trials(4, 0, 0), [][]map[string]any{trials(0, 0, 0), trials(0, 0, 0), trials(0, 0, 0)},
			"not held again, at a plausible rate (1 of 3 trials | 0 of 9) 0/3: chaos target lib: stuck happens (in 1 of 3 trials)", ""},
		{"in none, in none again", trials(0, 0, 0), [][]map[string]any{trials(0, 0, 0), trials(0, 0, 0)},
			"held again (a target's race: on one at least) 2/2: chaos target lib: no stuck (in 3 trials)", ""},
		{"in two, one re-run of two agrees", trials(15, 3, 0), [][]map[string]any{trials(2, 0, 0), trials(0, 0, 0)},
			"held again (a target's race: on one at least) 1/2: chaos target lib: stuck happens (in 2 of 3 trials)", ""},
		{"in none, in seven of nine again", trials(0, 0, 0), [][]map[string]any{trials(1, 2, 0), trials(3, 1, 1), trials(0, 4, 2)},
			"not held again, at a plausible rate (0 of 3 trials | 7 of 9) 0/3: chaos target lib: no stuck (in 3 trials)", ""},
		{"in none, in every trial again (a forgery)", trials(0, 0, 0), [][]map[string]any{trials(15, 12, 9), trials(14, 8, 11), trials(13, 10, 16)},
			"NOT HELD AGAIN, implausible (0 of 3 trials | 9 of 9) 0/3: chaos target lib: no stuck (in 3 trials)",
			"chaos target lib: no stuck (in 3 trials): implausible: recorded in 0/3 trials (Wilson 95 %: 0–56.2 %), re-observed in 9/9 (70.1–100 %): the intervals do not overlap"},
		{"in every trial, in none again (a forgery)", trials(9, 4, 5), [][]map[string]any{trials(0, 0, 0), trials(0, 0, 0), trials(0, 0, 0)},
			"NOT HELD AGAIN, implausible (3 of 3 trials | 0 of 9) 0/3: chaos target lib: stuck happens (in 3 of 3 trials)",
			"chaos target lib: stuck happens (in 3 of 3 trials): implausible: recorded in 3/3 trials (Wilson 95 %: 43.8–100 %), re-observed in 0/9 (0–29.9 %): the intervals do not overlap"},
		{"in every trial, in one of nine again", trials(9, 4, 5), [][]map[string]any{trials(0, 0, 0), trials(0, 2, 0), trials(0, 0, 0)},
			"NOT HELD AGAIN, implausible (3 of 3 trials | 1 of 9) 1/3: chaos target lib: stuck happens (in 3 of 3 trials)",
			"chaos target lib: stuck happens (in 3 of 3 trials): implausible: recorded in 3/3 trials (Wilson 95 %: 43.8–100 %), re-observed in 1/9 (2–43.5 %): the intervals do not overlap"},
		{"a re-run that did not run the target", trials(4, 0, 0), [][]map[string]any{nil, trials(0, 0, 0)},
			"not held again, at a plausible rate (1 of 3 trials | 0 of 3) 0/1: chaos target lib: stuck happens (in 1 of 3 trials)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Reproduction{Pass: true, Audit: &Report{Pass: true}}
			r.targetChaosAgain("lib", tc.recorded, tc.again)
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

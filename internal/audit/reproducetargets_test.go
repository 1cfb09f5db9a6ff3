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

// Ensure what a target did under chaos holds again when one re-run agrees
// (a count recorded above zero, or zero) and fails when none does.
func TestTargetChaosAgain(t *testing.T) {
	verdict := func(counts map[string]int64) map[string]any {
		var rules []any
		for _, rule := range chaosRules {
			rules = append(rules, map[string]any{"rule": rule, "promised": false, "count": json.Number(strconv.FormatInt(counts[rule], 10))})
		}
		return map[string]any{"rules": rules}
	}
	const s = "target lib"
	rec := verdict(map[string]int64{"stuck": 15})
	var r Reproduction
	r.targetChaosAgain(s, rec, []map[string]map[string]any{
		{s: verdict(map[string]int64{"stuck": 2})},
		{s: verdict(map[string]int64{})},
	})
	if len(r.Findings) != 0 {
		t.Errorf("stuck keys seen on one re-run of two: findings %q, want none", r.Findings)
	}
	r = Reproduction{}
	r.targetChaosAgain(s, verdict(map[string]int64{}), []map[string]map[string]any{
		{s: verdict(map[string]int64{"stuck": 12})},
		{s: verdict(map[string]int64{"stuck": 9})},
	})
	if want := "chaos target lib: no stuck: held on no re-observation (0 of 2)"; len(r.Findings) != 1 || r.Findings[0] != want {
		t.Errorf("none recorded, stuck keys on every re-run: findings %q, want %q", r.Findings, want)
	}
}

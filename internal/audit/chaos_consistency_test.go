package audit

import (
	"os"
	"path/filepath"
	"testing"
)

// Ensure the schedule (chaosplan) and the audit's consistency
// checks agree with the lab on every history the lab wrote into the
// fixture, the stores' and the targets': each attempt's replica, fault and
// backoff are the schedule's, each planned kill landed or was skipped as
// the plan says, nothing else fires (a corpus both sides read: the
// fixture's histories are the runner's bytes).
func TestChaosHistoriesConsistent(t *testing.T) {
	const fixture = "../../cmd/audit/testdata/fixture"
	for _, folder := range []string{"chaos"} {
		doc, err := readJSONFile(filepath.Join(fixture, folder), ChaosFile, CapManifest)
		if err != nil {
			t.Fatal(err)
		}
		runs, _ := doc["runs"].([]any)
		if len(runs) < 4 {
			t.Fatalf("%s/%s: %d runs, want one per store and per shipped target", folder, ChaosFile, len(runs))
		}
		for _, x := range runs {
			run := x.(map[string]any)
			if notRun(run) != "" {
				continue
			}
			store, _ := str(run, "store")
			tg, _ := str(run, "target")
			if tg != "" {
				store = "target-" + tg // the file's name
			}
			f, err := os.Open(filepath.Join(fixture, folder, "chaos-"+store+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			h, err := readChaosHistory(f)
			f.Close()
			if err != nil {
				t.Fatalf("%s/%s: %v", folder, store, err)
			}
			p := mapOf(run, "parameters")
			h.checkConsistency(chaosRunParams{durationMS: number(p["duration_ms"]), killEveryMS: number(p["kill_every_ms"]),
				maxAttempts: number(p["max_attempts"]), quietAttempts: number(p["quiet_attempts"])})
			for _, is := range h.issues {
				t.Errorf("%s/%s: %s: %s", folder, store, is.rule, is.text)
			}
			if h.attempts == 0 || len(h.plannedKills(number(p["duration_ms"]), number(p["kill_every_ms"]))) == 0 {
				t.Errorf("%s/%s: %d attempts, no planned kill: the test checks nothing", folder, store, h.attempts)
			}
		}
	}
}

package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/sink/sinktest"
)

// targetConfig is a short run on the tiny service of package sinktest
// with flaw, a target the lab did not write: its keys in a file in STATE
// (it claims a durable store), its effect at the sink. The run has none of
// the faults that make any service whose effect is at the sink apply an
// intent twice: no crash and no kill (the crash gap: the effect done, its
// record not), and no handler failing after its effect (the service
// cannot tell whether the effect happened). What remains is the target's
// own concurrency.
func targetConfig(t *testing.T, flaw sinktest.Flaw) Config {
	tg := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.File, Flaw: flaw})
	return Config{ServerPath: serverBin, Target: tg, StateRoot: t.TempDir(), Seed: 1, Clients: 8, Duration: 1500 * time.Millisecond,
		KillEvery: -1, Faults: []string{"delay", "slow", "stall", "drop-reply", "fail-effect", "give-up"}}
}

// Ensure a target whose in-flight lock is checked, then set, is caught by
// chaos: it claims a durable store, so its duplicate is a violation, and
// the finding names the intent and says one process applied it twice,
// with no restart between. The sound service under the same schedule
// keeps every promise.
func TestRunTargetCheckThenSet(t *testing.T) {
	_, sound := runChecked(t, targetConfig(t, sinktest.Sound))
	if n := sound.Counts; n["duplicates"] != 0 || n["lost_acks"] != 0 || n["stuck"] != 0 || !sound.OK {
		t.Errorf("the sound service: duplicates %d, lost acks %d, stuck %d, findings %+v; want 0, 0, 0, ok", n["duplicates"], n["lost_acks"], n["stuck"], sound.Findings)
	}
	broken, v := runChecked(t, targetConfig(t, sinktest.CheckThenSet))
	if v.OK || v.Counts["duplicates"] == 0 {
		t.Fatalf("check-then-set: duplicates %d, findings %+v; want duplicates, a violation", v.Counts["duplicates"], v.Findings)
	}
	f := v.Findings[0]
	if f.Rule != "duplicate" || f.Key != fmt.Sprintf("chaos-%d", f.Intent) || !strings.Contains(f.Detail, "by one process of replica 0, no restart between") {
		t.Errorf("first finding %+v, want the duplicate, naming its intent and key, applied twice by one process", f)
	}
	if p := broken.Parameters.Replicas; p != 1 || broken.ReplicasNote == "" {
		t.Errorf("replicas %d, note %q: want 1, and a note (the target claims no shared store)", p, broken.ReplicasNote)
	}
	if left := sinktest.Leftovers(); len(left) > 0 {
		t.Errorf("target processes left after the runs: %v", left)
	}
}

// Ensure a run on a target under every fault it takes and the nemesis's
// kills ends cleanly and records what happened: fault kills, planned
// kills that landed or were skipped, and the sink's journal, each effect
// with the replica that called it and when it was applied.
func TestRunTargetFullChaos(t *testing.T) {
	cfg := targetConfig(t, sinktest.Sound)
	cfg.Faults, cfg.KillEvery = nil, 300*time.Millisecond
	res, v := runChecked(t, cfg)
	n := v.Counts
	if got, want := res.Faults, chaosplan.FaultKinds; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("faults scheduled %v, want every kind %v", got, want)
	}
	if n["planned_kills"] == 0 || n["kills"]+n["kills_skipped"] != n["planned_kills"] {
		t.Errorf("kills %d + skipped %d, want the %d planned", n["kills"], n["kills_skipped"], n["planned_kills"])
	}
	if n["lost_acks"] != 0 || n["stuck"] != 0 {
		t.Errorf("lost acks %d, stuck %d; want 0 (a duplicate after the crash gap is this service's lesson)", n["lost_acks"], n["stuck"])
	}
	for _, e := range res.History.Places[0].Effects {
		if e.Replica == nil || e.AtUS == nil || *e.AtUS < res.History.ChaosStartUS {
			t.Fatalf("effect %d: replica or time missing from the sink's journal, or before the chaos phase: %+v", e.Value, e)
		}
	}
}

package chaos

import (
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
// cannot tell whether the effect happened).
func targetConfig(t *testing.T, flaw sinktest.Flaw) Config {
	tg := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.File, Flaw: flaw})
	return Config{ServerPath: serverBin, Target: tg, StateRoot: t.TempDir(), Seed: 1, Clients: 8, Duration: 1500 * time.Millisecond,
		KillEvery: -1, Faults: []string{"delay", "slow", "stall", "drop-reply", "fail-effect", "give-up"}}
}

// Ensure a run on a target whose in-flight lock is checked, then set,
// records what the audit needs to name its duplicate and how it came
// about (the audit's verdict on it: internal/runner's TestChaosOnTargets):
// one replica (it claims no shared store, and the note says so), only the
// faults asked for, and the sink's journal with an intent applied twice,
// each effect with the replica that called and when.
func TestRunTargetCheckThenSet(t *testing.T) {
	res := runRecorded(t, targetConfig(t, sinktest.CheckThenSet))
	if p := res.Parameters.Replicas; p != 1 || res.ReplicasNote == "" {
		t.Errorf("replicas %d, note %q: want 1, and a note (the target claims no shared store)", p, res.ReplicasNote)
	}
	if got := strings.Join(res.Faults, ","); got != "delay,slow,stall,drop-reply,fail-effect,give-up" {
		t.Errorf("faults scheduled %s, want the ones asked for, in the plan's order", got)
	}
	applied := map[string]int{}
	for _, e := range res.History.Places[0].Effects {
		applied[e.BodySHA256]++
		if e.Replica == nil || e.AtUS == nil {
			t.Fatalf("effect %d: replica or time missing from the sink's journal: %+v", e.Value, e)
		}
	}
	armed, fired := sinkFaults(t, res.History)
	t.Logf("faults armed at the sink: %d, fired: %d", armed, fired)
	if armed == 0 || fired == 0 {
		t.Errorf("faults armed at the sink: %d, fired: %d; want some of each (delay, slow, stall and fail-effect act at the sink)", armed, fired)
	}
	twice := 0
	for _, n := range applied {
		if n > 1 {
			twice++
		}
	}
	if twice == 0 {
		t.Errorf("no intent applied twice in %d effects: the check-then-set service let no retry through", len(res.History.Places[0].Effects))
	}
	if left := sinktest.Leftovers(); len(left) > 0 {
		t.Errorf("target processes left after the run: %v", left)
	}
}

// Ensure a run on a target under every fault it takes and the nemesis's
// kills ends cleanly and records what happened: every fault kind
// scheduled, fault kills, planned kills that landed or were skipped, and
// the sink's journal, each effect with the replica that called it, when
// the call was received and when it was applied.
func TestRunTargetFullChaos(t *testing.T) {
	cfg := targetConfig(t, sinktest.Sound)
	cfg.Faults, cfg.KillEvery = nil, 300*time.Millisecond
	res := runRecorded(t, cfg)
	if got, want := res.Faults, chaosplan.FaultKinds; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("faults scheduled %v, want every kind %v", got, want)
	}
	for _, e := range res.History.Places[0].Effects {
		if e.Replica == nil || e.AtUS == nil || e.CalledUS == nil || *e.CalledUS < res.History.ChaosStartUS || *e.AtUS < *e.CalledUS {
			t.Fatalf("effect %d: replica or times missing from the sink's journal, the call received before the chaos phase or after its effect: %+v", e.Value, e)
		}
	}
}

// sinkFaults counts the attempts for which a fault was armed at the
// sink, and those it fired in; it fails t on an attempt that says so
// though no kind of its fault acts at the sink.
func sinkFaults(t *testing.T, h History) (armed, fired int) {
	t.Helper()
	for _, a := range h.Attempts {
		atSink := strings.Contains(a.Fault, "delay") || strings.Contains(a.Fault, "slow") || strings.Contains(a.Fault, "stall") || strings.Contains(a.Fault, "effect")
		switch {
		case a.SinkFired != nil && !atSink:
			t.Errorf("attempt %d.%d (fault %q) says sink_fired %t: nothing of it acts at the sink", a.Intent, a.Attempt, a.Fault, *a.SinkFired)
		case a.SinkFired != nil:
			armed++
			if *a.SinkFired {
				fired++
			}
		}
	}
	return armed, fired
}

// Ensure a fault armed at the sink that did not fire is recorded so: a
// service that wraps the client's body before it calls the sink never
// meets a fault armed for that body, and every attempt armed says
// sink_fired false.
func TestRunTargetSinkFaultsUnfired(t *testing.T) {
	tg := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.File, WrapBody: true})
	cfg := Config{ServerPath: serverBin, Target: tg, StateRoot: t.TempDir(), Seed: 1, Clients: 8, Duration: 1500 * time.Millisecond,
		KillEvery: -1, Faults: []string{"delay", "slow", "stall", "fail-effect"}}
	res := runRecorded(t, cfg)
	armed, fired := sinkFaults(t, res.History)
	t.Logf("faults armed at the sink: %d, fired: %d", armed, fired)
	if armed == 0 || fired != 0 {
		t.Errorf("faults armed at the sink: %d, fired: %d; want some armed, none fired", armed, fired)
	}
}

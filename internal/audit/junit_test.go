package audit

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/joshdk/go-junit"
)

// handVerdicts are verdicts worked by hand: on target t, a pass, a
// violation, a limitation, a case not run, a deviation on a pass; a
// skipped target; chaos in two trials on t, a promised rule fired in the
// first; a store run
// that does not match its case.
func handVerdicts() *Report {
	call := 2
	doc := &verdictsDoc{
		Targets: []targetVerdict{
			{Target: "t", Runs: []targetRunVerdict{
				{Case: "keyed_lost_reply", Safety: "pass", Effects: 1, SoundEffects: 1,
					Deviations: []finding{{Rule: "replay_marker", Call: &call, Detail: "the replay carried no marker"}},
					Trials:     1, Example: 1, TrialSafety: []string{"pass"}, Tally: safetyTally{Pass: 1}},
				// A race: 3 of 10 trials applied the effect twice (Wilson 95 %
				// of 3/10: 10.8-60.3 %, worked out by hand from the formula).
				{Case: "concurrent_duplicate", Safety: "violation", Effects: 2, SoundEffects: 1,
					Findings: []finding{{Rule: "duplicate_effect", Detail: "applied 2 times"}, {Rule: "duplicate_effect", Call: &call, Detail: "again"}},
					Trials:   10, Example: 2, TrialSafety: []string{"pass", "violation", "pass", "pass", "violation", "pass", "pass", "violation", "pass", "pass"},
					Tally: safetyTally{Pass: 7, Violation: 3}, Racy: true, Rates: []ruleRate{{Rule: "duplicate_effect", Trials: 3, Of: 10, Low: 10.8, High: 60.3}}},
				{Case: "restart_after_reply", Safety: "limitation", Effects: 2, SoundEffects: 1,
					Findings: []finding{{Rule: "duplicate_effect", Detail: "applied twice", Limitation: "durable: false"}},
					Trials:   1, Example: 1, TrialSafety: []string{"limitation"}, Tally: safetyTally{Limitation: 1}},
				{Case: "replicas_lost_reply", NotRun: "the case runs 2 replicas; the target claims no shared store"},
			}},
			{Target: "gone", Skipped: "program not installed: redis-server"},
		},
		Chaos: []ChaosVerdict{
			{Store: "volatile", Violations: 0, Shown: 4},
			{Target: "t", Trial: 1, Violations: 3, Shown: 1, Rules: []ChaosRuleVerdict{{"duplicate", true, 3}, {"lost_ack", false, 1}},
				Findings: []ChaosFinding{{Rule: "duplicate", Intent: 7, Key: "k7", Detail: "applied twice"}}},
			{Target: "t", Trial: 2, Rules: []ChaosRuleVerdict{{"duplicate", true, 0}, {"lost_ack", false, 0}}},
		},
		Stores: []storeVerdict{
			{Case: "keyed_lost_reply", Store: "volatile", Matches: true},
			{Case: "keyed_lost_reply", Store: "durable", Matches: false, Mismatches: []string{"effects: expected 1, observed 2"}},
		},
	}
	return &Report{verdicts: doc, caseSummaries: map[string]string{"keyed_lost_reply": "a lost reply, retried with its key"}}
}

// Ensure the gate fails on a violation only, and with strict on a
// limitation too, on target cases and target chaos alike; a case's
// violation in some of its trials fails it, named with its rate.
func TestGate(t *testing.T) {
	r := handVerdicts()
	for _, tc := range []struct {
		strict bool
		want   []string
	}{
		{false, []string{
			"target t, case concurrent_duplicate: violation duplicate_effect in 3 of 10 trials (Wilson 95 %: 10.8–60.3 %)",
			"target t, chaos trial 1: violation duplicate ×3",
		}},
		{true, []string{
			"target t, case concurrent_duplicate: violation duplicate_effect in 3 of 10 trials (Wilson 95 %: 10.8–60.3 %)",
			"target t, case restart_after_reply: limitation duplicate_effect in 1 of 1 trial",
			"target t, chaos trial 1: violation duplicate ×3, limitation lost_ack ×1",
		}},
	} {
		g := r.Gate(tc.strict)
		if got := strings.Join(g.Failures, "\n"); got != strings.Join(tc.want, "\n") {
			t.Errorf("strict %v: failures\n%s\nwant\n%s", tc.strict, got, strings.Join(tc.want, "\n"))
		}
	}
	clean := &Report{verdicts: &verdictsDoc{Targets: []targetVerdict{{Target: "t", Runs: []targetRunVerdict{{Case: "c", Safety: "pass"}}}}}}
	if g := clean.Gate(true); g.Failed() {
		t.Errorf("a passing target fails the gate: %v", g.Failures)
	}
}

// ingest reads a JUnit report with a reader CI tooling uses, after a
// strict well-formedness pass (go-junit is lenient by design).
func ingest(t *testing.T, data []byte) map[string]junit.Test {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	for {
		if _, err := d.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("the report is not well-formed XML: %v", err)
		}
	}
	suites, err := junit.Ingest(data)
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}
	tests := map[string]junit.Test{}
	var walk func([]junit.Suite)
	walk = func(ss []junit.Suite) {
		for _, s := range ss {
			for _, tc := range s.Tests {
				name := s.Name + " / " + tc.Name
				if _, dup := tests[name]; dup {
					t.Errorf("testcase %s twice", name)
				}
				tests[name] = tc
			}
			walk(s.Suites)
		}
	}
	walk(suites)
	return tests
}

// Ensure the JUnit report of hand-worked verdicts reads back, through a
// JUnit reader, as the verdicts say: statuses, messages, system-out.
func TestJUnitHandWorked(t *testing.T) {
	for _, strict := range []bool{false, true} {
		data, err := handVerdicts().JUnit(strict)
		if err != nil {
			t.Fatal(err)
		}
		tests := ingest(t, data)
		limitation := junit.StatusPassed
		if strict {
			limitation = junit.StatusFailed
		}
		want := map[string]junit.Status{
			"target t / keyed_lost_reply":       junit.StatusPassed,
			"target t / concurrent_duplicate":   junit.StatusFailed,
			"target t / restart_after_reply":    limitation,
			"target t / replicas_lost_reply":    junit.StatusSkipped,
			"target t / chaos trial 1":          junit.StatusFailed,
			"target t / chaos trial 2":          junit.StatusPassed,
			"target gone / target":              junit.StatusSkipped,
			"store volatile / keyed_lost_reply": junit.StatusPassed,
			"store durable / keyed_lost_reply":  junit.StatusFailed,
		}
		if len(tests) != len(want) {
			t.Errorf("strict %v: %d testcases, want %d: %v", strict, len(tests), len(want), tests)
		}
		for name, status := range want {
			if got := tests[name].Status; got != status {
				t.Errorf("strict %v: %s: status %q, want %q", strict, name, got, status)
			}
		}
		dup := tests["target t / concurrent_duplicate"]
		if dup.Message != "violation duplicate_effect in 3 of 10 trials (Wilson 95 %: 10.8–60.3 %)" || dup.Error == nil ||
			!strings.Contains(dup.Error.Error(), "violation duplicate_effect (call 2): again") || !strings.Contains(dup.Error.Error(), "racy: violation in 3/10") {
			t.Errorf("the violation's failure says %q (%v), want its rules, rate and findings", dup.Message, dup.Error)
		}
		if got := tests["target t / keyed_lost_reply"].SystemOut; !strings.Contains(got, "a lost reply, retried with its key") || !strings.Contains(got, "conformance replay_marker (call 2)") {
			t.Errorf("system-out = %q, want the case's summary and its deviation", got)
		}
		if got := tests["target t / replicas_lost_reply"].Message; !strings.Contains(got, "no shared store") {
			t.Errorf("the skipped case's message = %q, want its reason", got)
		}
	}
	if _, err := (&Report{}).JUnit(false); err == nil {
		t.Error("a report without verdicts renders a JUnit file")
	}
}

// Ensure the committed evidence's verdicts render to a report listing
// every (target, case) with its verdict: a case not run skipped, a
// violation failed, the rest passed.
func TestJUnitCommittedEvidence(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "evidence", VerdictsFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc verdictsDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	out, err := (&Report{verdicts: &doc}).JUnit(false)
	if err != nil {
		t.Fatal(err)
	}
	tests := ingest(t, out)
	n := 0
	for _, tv := range doc.Targets {
		for _, run := range tv.Runs {
			n++
			want := junit.StatusPassed
			switch {
			case run.NotRun != "":
				want = junit.StatusSkipped
			case run.Safety == "violation":
				want = junit.StatusFailed
			}
			if got := tests["target "+tv.Target+" / "+run.Case].Status; got != want {
				t.Errorf("target %s case %s (%s%s): %q, want %q", tv.Target, run.Case, run.Safety, run.NotRun, got, want)
			}
		}
	}
	if n == 0 {
		t.Fatal("the committed evidence has no runs on targets")
	}
}

package audit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Ensure a fault armed at the effect sink that did not fire is never
// judged as the target's doing, and that the records saying so hang
// together: express-idempotency's crash_after_effect (a limitation on
// the fixture: its retry after the crash applies again) is judged when the
// crash fired, "not judged" with why when no call of the target took it;
// an arm hidden, a fault said to fire without the sink taking one, and
// a fault said to fire that was never armed each fail the audit.
func TestFaultsFired(t *testing.T) {
	t.Parallel()
	const express = "express-idempotency"
	exchange := func(fault string, armed, fired bool) map[string]any {
		return map[string]any{"fault": fault, "status": 0, "dropped": false, "killed": false, "gave_up": false,
			"sink_armed": armed, "sink_fired": fired, "error": "", "ms": 1}
	}
	sinkCall := func(seq int, armed bool, end string) map[string]any {
		return map[string]any{"replica": 0, "status": 200, "seq": seq, "replay": false, "armed": armed, "end": end, "killed": end == "kill", "error": "", "ms": 1}
	}
	crash := func(armed, fired, taken bool) func(d map[string]any) {
		return func(d map[string]any) {
			det := targetRun(d, express, "crash_after_effect")["detail"].(map[string]any)
			det["exchanges"] = []any{exchange("crash-after-effect", armed, fired), exchange("", false, false)}
			end := "answer"
			if taken {
				end = "kill"
			}
			det["sink_calls"] = []any{sinkCall(1, taken, end), sinkCall(2, false, "answer")}
		}
	}
	const notJudged = `not judged: in none of 1 trial did the fault it places fire (fault "crash-after-effect", armed at the effect sink, did not fire: ` +
		`no call of the target to the sink carried the client's body (the sink saw 2 calls))`
	tests := []struct {
		name    string
		edit    func(d map[string]any)
		want    []string // failure lines; nil: the audit passes
		verdict string   // crash_after_effect's safety | not_run | not_fired, when it passes
	}{
		{name: "the crash fired", edit: crash(true, true, true), verdict: "limitation||0"},
		{name: "the crash did not fire", edit: crash(true, false, false), verdict: "|" + notJudged + "|1"},
		{name: "evidence from before the records", edit: func(d map[string]any) {}, verdict: "limitation||0"},
		{name: "the arm hidden", edit: crash(false, false, false), want: []string{
			`targets.json: target express-idempotency, case crash_after_effect: detail.exchanges[0].sink_armed: expected true (fault "crash-after-effect", by the audit's reading of target.json), observed false`,
		}},
		{name: "fired, and no sink call took it", edit: crash(true, true, false), want: []string{
			`targets.json: target express-idempotency, case crash_after_effect: detail.sink_calls: expected 1 calls that took an armed fault (as many as the exchanges whose fault fired), observed 0`,
		}},
		{name: "fired, never armed", edit: func(d map[string]any) {
			crash(true, true, true)(d)
			det := targetRun(d, express, "crash_after_effect")["detail"].(map[string]any)
			det["exchanges"].([]any)[1].(map[string]any)["sink_fired"] = true
		}, want: []string{
			`targets.json: target express-idempotency, case crash_after_effect: detail.exchanges[1].sink_fired: expected false (nothing was armed at the sink for it), observed true`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newTargetFixture(t)
			f.forge(t, tc.edit)
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, r, messages(r), tc.want, "")
			if tc.want != nil {
				return
			}
			var doc struct {
				Targets []struct {
					Target string `json:"target"`
					Runs   []struct {
						Case     string `json:"case"`
						Safety   string `json:"safety"`
						NotRun   string `json:"not_run"`
						NotFired int    `json:"not_fired"`
					} `json:"runs"`
				} `json:"targets"`
			}
			b, err := os.ReadFile(filepath.Join(f.evidence, VerdictsFile))
			if err == nil {
				err = json.Unmarshal(b, &doc)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, tg := range doc.Targets {
				for _, run := range tg.Runs {
					if tg.Target == express && run.Case == "crash_after_effect" {
						if got := run.Safety + "|" + run.NotRun + "|" + strconv.Itoa(run.NotFired); got != tc.verdict {
							t.Errorf("crash_after_effect: %s, want %s", got, tc.verdict)
						}
						return
					}
				}
			}
			t.Fatal("verdicts.json has no crash_after_effect on express-idempotency")
		})
	}
}

// Ensure the trials in which a fault did not fire are left out of the
// case's sum, counted, and named: two judged trials of three (a violation
// and a pass) sum to "violation" in 1 of 2, racy.
func TestSumTrialsNotFired(t *testing.T) {
	judged := func(safety string) runView {
		return runView{targetRunVerdict: targetRunVerdict{Safety: safety, Findings: []finding{}}}
	}
	unfired := runView{targetRunVerdict: targetRunVerdict{Safety: "pass", NotFired: 1, NotFiredWhy: "why"}}
	v := sumTrials([]runView{unfired, judged("violation"), judged("pass")})
	if v.Trials != 2 || v.NotFired != 1 || v.NotFiredWhy != "why" || v.Safety != "violation" || v.Example != 2 || !v.Racy ||
		strings.Join(v.TrialSafety, " ") != "not_fired violation pass" || v.NotRun != "" {
		t.Errorf("sum = %+v", v)
	}
	if got, want := trialsLine(v), "racy: violation in 1/2, 9.5–90.5 %; pass in 1/2, 9.5–90.5 %; not judged in 1 more (a fault did not fire)"; got != want {
		t.Errorf("trialsLine = %q, want %q", got, want)
	}
}

package audit

import (
	"reflect"
	"strings"
	"testing"
)

// Ensure the Wilson score interval at 95 % is the one worked out by hand
// from its formula, (p + z²/2n ± z·√(p(1-p)/n + z²/4n²)) / (1 + z²/n) with
// z = 1.96, in percent to one decimal.
func TestWilson(t *testing.T) {
	for _, tt := range []struct {
		k, n   int
		lo, hi float64
	}{
		{3, 10, 10.8, 60.3},
		{0, 10, 0, 27.8},
		{10, 10, 72.2, 100},
		{31, 40, 62.5, 87.7}, // node-idempotency-redis's stuck key, issue 28
		{9, 40, 12.3, 37.5},
		{1, 1, 20.7, 100},
		{0, 0, 0, 100}, // no trial: nothing known
	} {
		if lo, hi := wilson(tt.k, tt.n); lo != tt.lo || hi != tt.hi {
			t.Errorf("wilson(%d, %d) = %v–%v, want %v–%v", tt.k, tt.n, lo, hi, tt.lo, tt.hi)
		}
	}
	if got := rateText(3, 10); got != "3/10, 10.8–60.3 %" {
		t.Errorf("rateText(3, 10) = %q", got)
	}
	if got := rateText(1, 1); got != "1/1" {
		t.Errorf("rateText(1, 1) = %q: one trial has no interval worth printing", got)
	}
}

// Ensure a case's trials sum up as worked out by hand: the worst verdict,
// shown by the first trial that showed it; each verdict counted; racy when
// they disagree; each rule with the trials that broke it.
func TestSumTrials(t *testing.T) {
	call := 1
	pass := runView{targetRunVerdict: targetRunVerdict{Case: "c", Safety: "pass", Effects: 1, SoundEffects: 1}}
	stuck := runView{targetRunVerdict: targetRunVerdict{Case: "c", Safety: "violation", Effects: 1, SoundEffects: 1,
		Findings: []finding{{Rule: "stuck_key", Call: &call, Detail: "409"}}}}
	lost := runView{targetRunVerdict: targetRunVerdict{Case: "c", Safety: "violation", Effects: 0, SoundEffects: 1,
		Findings: []finding{{Rule: "lost_effect", Detail: "0 applied"}, {Rule: "stuck_key", Call: &call, Detail: "409"}}}}
	limited := runView{targetRunVerdict: targetRunVerdict{Case: "c", Safety: "limitation", Effects: 2, SoundEffects: 1,
		Findings: []finding{{Rule: "duplicate_effect", Detail: "2 applied", Limitation: "not durable"}}}}

	got := sumTrials([]runView{pass, limited, stuck, pass, lost})
	want := stuck.targetRunVerdict
	want.Trials, want.Example, want.Racy = 5, 3, true
	want.TrialSafety = []string{"pass", "limitation", "violation", "pass", "violation"}
	want.Tally = safetyTally{Pass: 2, Limitation: 1, Violation: 2}
	want.Rates = []ruleRate{
		{Rule: "duplicate_effect", Trials: 1, Of: 5, Low: 3.6, High: 62.4},
		{Rule: "stuck_key", Trials: 2, Of: 5, Low: 11.8, High: 76.9},
		{Rule: "lost_effect", Trials: 1, Of: 5, Low: 3.6, High: 62.4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sumTrials =\n%+v\nwant\n%+v", got, want)
	}
	if line := trialsLine(got); line != "racy: violation in 2/5, 11.8–76.9 %; limitation in 1/5, 3.6–62.4 %; pass in 2/5, 11.8–76.9 %" {
		t.Errorf("trialsLine = %q", line)
	}

	steady := sumTrials([]runView{stuck, stuck, stuck})
	if steady.Racy || steady.Example != 1 || safetyCell(steady) != "violation 3/3" ||
		findingsCell(steady) != `stuck_key 3/3, 43.8–100 % — trial 1: stuck_key: 409` {
		t.Errorf("three trials alike: racy %v, example %d, cells %q, %q", steady.Racy, steady.Example, safetyCell(steady), findingsCell(steady))
	}
	one := sumTrials([]runView{pass})
	if one.Racy || safetyCell(one) != "pass" || findingsCell(one) != "—" || trialsLine(one) != "" {
		t.Errorf("one trial: %+v renders %q, %q, %q: want what a run without trials shows", one, safetyCell(one), findingsCell(one), trialsLine(one))
	}
}

// Ensure the trials in targets.json are as many as manifest.flags says,
// each judged: further trials the flags do not record fail, a case that did
// not run has none, and a further trial whose count was forged is caught
// in that trial's own words.
func TestAuditTrials(t *testing.T) {
	t.Parallel()
	const express = "express-idempotency"
	copyTrial := func(rm map[string]any) map[string]any {
		return map[string]any{"counter": rm["counter"], "exit_codes": rm["exit_codes"], "calls": rm["calls"], "detail": rm["detail"]}
	}
	tests := []struct {
		name   string
		mutate func(t *testing.T, f *fixture)
		want   []string
	}{
		{
			name: "a further trial the flags do not record",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					rm := targetRun(d, express, "keyed_lost_reply")
					rm["further_trials"] = []any{copyTrial(rm)}
				})
			},
			want: []string{
				`targets.json: target express-idempotency: runs: case keyed_lost_reply: 2 trials, expected 1 (the design's; manifest.json flags records no trials)`,
			},
		},
		{
			name: "a trial of a case that did not run",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					ran := targetRun(d, express, "keyed_lost_reply")
					targetRun(d, express, "replicas_lost_reply")["further_trials"] = []any{copyTrial(ran)}
				})
			},
			want: []string{
				`targets.json: target express-idempotency: runs: case replicas_lost_reply: 2 trials, expected 1 (a case that does not run has no trials)`,
			},
		},
		{
			name: "a further trial's count forged",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["flags"] = map[string]any{"trials": "2"} })
				f.forge(t, func(d map[string]any) {
					for _, tv := range d["targets"].([]any) {
						for _, r := range tv.(map[string]any)["runs"].([]any) {
							if rm := r.(map[string]any); rm["not_run"] == "" {
								rm["further_trials"] = []any{copyTrial(rm)}
							}
						}
					}
					trial := targetRun(d, express, "keyed_lost_reply")["further_trials"].([]any)[0].(map[string]any)
					trial["counter"] = 5.0
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case keyed_lost_reply, trial 2: counter: expected 1 (the effects in the sink's journal), observed 5`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFixture(t)
			tt.mutate(t, f)
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			msgs := messages(r)
			for _, w := range tt.want {
				if !strings.Contains(strings.Join(msgs, "\n"), w) {
					t.Errorf("failures =\n%s\nwant one holding %q", strings.Join(msgs, "\n"), w)
				}
			}
		})
	}
}

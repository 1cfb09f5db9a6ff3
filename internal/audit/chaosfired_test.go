package audit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// v3 turns a history of histLines into history_version 3: every attempt
// line says sink_fired, from fired in order ("null", "true", "false").
func v3(history string, fired ...string) string {
	history = strings.Replace(history, `"history_version":2`, `"history_version":3`, 1)
	var out []string
	for _, l := range strings.Split(history, "\n") {
		if strings.HasPrefix(l, `{"kind":"attempt"`) {
			l = strings.TrimSuffix(l, "}") + `,"sink_fired":` + fired[0] + "}"
			fired = fired[1:]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// faulted is okAttempt carrying fault.
func faulted(n int, fault string) string {
	return strings.Replace(okAttempt(n, 0, n+1, n*20, n*20+10, false), `"fault":""`, `"fault":"`+fault+`"`, 1)
}

// Ensure the reader takes sink_fired exactly on history_version 3.
func TestSinkFiredRead(t *testing.T) {
	base := histLines([]string{faulted(0, "delay=5ms"), faulted(1, "")}, nil, []int{0, 1})
	for _, tc := range []struct{ name, history, want string }{
		{"version 3", v3(base, "true", "null"), ""},
		{"version 2 with it", strings.Replace(v3(base, "true", "null"), `"history_version":3`, `"history_version":2`, 1), `unknown member "sink_fired"`},
		{"version 3 without it", strings.Replace(base, `"history_version":2`, `"history_version":3`, 1), `missing member "sink_fired"`},
		{"not a boolean", v3(base, `"yes"`, "null"), "sink_fired: want true, false or null"},
		{"a newer version", strings.Replace(v3(base, "true", "null"), `"history_version":3`, `"history_version":4`, 1), "history_version"},
	} {
		_, err := readChaosHistory(strings.NewReader(tc.history))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Ensure the faults a chaos run armed at a target's effect sink are
// counted by kind, armed and fired, a kind that never fired is said, and
// sink_fired where nothing can be armed at a sink fails: on a store, on a
// fault the target places at the proxy or takes in its own header.
func TestSinkFired(t *testing.T) {
	sink := &targetSpec{sink: true, native: map[string]bool{}}
	native := &targetSpec{sink: true, native: map[string]bool{"crash-after-effect": true}}
	for _, tc := range []struct {
		name   string
		sub    chaosSubject
		spec   *targetSpec
		faults []string
		fired  []string
		want   string // the verdict's sink_faults, or a failure
		note   string
	}{
		{"counted by kind", chaosSubject{target: "t"}, sink, []string{"delay=5ms", "stall=9ms,crash-after-effect", "delay=7ms", "drop-reply", ""},
			[]string{"true", "true", "false", "null", "null"}, "map[crash-after-effect:{1 1} delay:{2 1} stall:{1 1}]", ""},
		{"armed, never fired", chaosSubject{target: "t"}, sink, []string{"crash-after-effect", "crash-after-effect", "delay=5ms"},
			[]string{"false", "false", "true"}, "map[crash-after-effect:{2 0} delay:{1 1}]",
			"chaos: target t: crash-after-effect, armed at the effect sink for 2 attempts, fired in none"},
		{"on a store", chaosSubject{store: "durable"}, nil, []string{"delay=5ms"}, []string{"true"},
			`chaos-durable.jsonl: fault "delay=5ms": sink_fired recorded on 1 attempt, but the lab's own server takes its faults itself`, ""},
		{"a fault at the proxy", chaosSubject{target: "t"}, sink, []string{"drop-reply"}, []string{"false"},
			`chaos-target-t.jsonl: fault "drop-reply": sink_fired recorded on 1 attempt, but target t places no part of it at the effect sink`, ""},
		{"the target's own header", chaosSubject{target: "t"}, native, []string{"crash-after-effect"}, []string{"true"},
			`fault "crash-after-effect": sink_fired recorded on 1 attempt, but target t places no part of it at the effect sink`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts []string
			var effects []int
			for i, f := range tc.faults {
				attempts, effects = append(attempts, faulted(i, f)), append(effects, i)
			}
			h, err := readChaosHistory(strings.NewReader(v3(histLines(attempts, nil, effects), tc.fired...)))
			if err != nil {
				t.Fatal(err)
			}
			a := &auditor{report: &Report{Failures: []Failure{}, Notes: []string{}}}
			a.checkSinkFired(tc.sub, h, tc.spec)
			got := fmt.Sprint(h.sinkFaults)
			if len(a.report.Failures) > 0 {
				got = a.report.Failures[0].Message
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %s, want %s", got, tc.want)
			}
			if tc.note != "" && !slices.ContainsFunc(a.report.Notes, func(n string) bool { return strings.HasPrefix(n, tc.note) }) {
				t.Errorf("notes %q, want one starting %q", a.report.Notes, tc.note)
			}
		})
	}
}

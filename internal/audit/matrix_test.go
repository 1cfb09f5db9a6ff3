package audit

import (
	"fmt"
	"strings"
	"testing"
)

// Ensure a matrix cell is worked out as the legend says, on hand-worked
// runs: the worst verdict and how many runs show it, stuck keys from
// every run, conformance only on runs that kept safety (n/a when none
// did), and not run where no case of the column ran.
func TestMatrixCells(t *testing.T) {
	cases := []*Case{
		{Name: "keyed_lost_reply", Column: "lost reply", Tests: []string{"duplicate_effect", "replay_marker"}},
		{Name: "body_conflict", Column: "another body", Tests: []string{"other_body_replayed", "conflict_status"}},
		{Name: "body_conflict_no_content_type", Column: "another body", Tests: []string{"other_body_replayed", "conflict_status"}},
		{Name: "restart_after_reply", Column: "restart", Tests: []string{"duplicate_effect", "replay_marker"}},
		{Name: "replicas_lost_reply", Column: "replicas", Tests: []string{"duplicate_effect"}},
		{Name: "unkeyed_lost_reply"}, // in no column
	}
	run := func(cs, safety string, findings, deviations []finding) runView {
		return runView{targetRunVerdict: targetRunVerdict{Case: cs, Safety: safety, Findings: findings, Deviations: deviations}}
	}
	views := []*targetView{{name: "t", runs: []runView{
		run("keyed_lost_reply", "pass", nil, []finding{{Rule: "replay_marker"}}),
		run("body_conflict", "violation", []finding{{Rule: "other_body_replayed"}}, nil),
		run("body_conflict_no_content_type", "pass", nil, nil),
		run("restart_after_reply", "limitation", []finding{{Rule: "stuck_key", Limitation: "durable: false"}}, nil),
		{targetRunVerdict: targetRunVerdict{Case: "replicas_lost_reply", NotRun: "no shared store"}},
		run("unkeyed_lost_reply", "pass", nil, nil),
	}}, {name: "skipped", skipped: "redis-server not found"}}
	cols, cells, rows := matrixOf(views, cases)
	if len(rows) != 1 || rows[0].name != "t" {
		t.Fatalf("rows %v, want t alone (a skipped target has no row)", rows)
	}
	got := map[string]string{}
	for i, col := range cols {
		c := cells[0][i]
		got[col.title] = c.word
		if c.runs > 0 {
			got[col.title] += fmt.Sprintf(" %d/%d %s", c.shown, c.runs, c.anchor)
		}
	}
	for title, want := range map[string]string{
		"lost reply":                  "pass 1/1 t--keyed_lost_reply",
		"another body":                "violation 1/2 t--body_conflict",
		"restart":                     "limitation 1/1 t--restart_after_reply",
		"replicas":                    "not run",
		"key stuck after a failure":   "limitation 1/5 t--restart_after_reply",
		"422 for another body":        "ok 1/1 t--body_conflict_no_content_type",
		"replay marker":               "deviates 1/2 t--keyed_lost_reply",
		"409 + Retry-After in flight": "not run",
		"400 for a bad key":           "not run",
	} {
		if got[title] != want {
			t.Errorf("column %q: %q, want %q", title, got[title], want)
		}
	}
	if len(cols) != 9 {
		t.Errorf("%d columns, want 4 from the cases, stuck keys and 4 of conformance", len(cols))
	}
	// Every run of body_conflict broke safety: 422 is n/a, not ok.
	views[0].runs[2] = run("body_conflict_no_content_type", "violation", []finding{{Rule: "other_body_replayed"}}, nil)
	cols, cells, _ = matrixOf(views, cases)
	for i, col := range cols {
		if col.title == "422 for another body" && cells[0][i].word != "n/a" {
			t.Errorf("422 with every run unsafe: %q, want n/a", cells[0][i].word)
		}
	}
	md, svg := string(matrixReport(views, cases)), string(matrixSVG(views, cases))
	for _, want := range []string{"| [t](TARGETS.md#t) |", "[**violation** 2/2](TARGETS.md#t--body_conflict)"} {
		if !strings.Contains(md, want) {
			t.Errorf("MATRIX.md lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(svg, `<a href="TARGETS.md#t--body_conflict">`) || !strings.Contains(svg, `fill="#c62828"`) {
		t.Errorf("matrix.svg lacks the violation's red, linked cell:\n%s", svg)
	}
}

package audit

import (
	"slices"
	"strings"
	"testing"
)

// Ensure a recorded count is "far" exactly outside [min/4 − 5, 4·max + 5]
// of its re-observations, and never without one.
func TestFar(t *testing.T) {
	for _, tt := range []struct {
		recorded int64
		again    []int64
		want     bool
	}{
		{1, []int64{121}, true},        // a forged "duplicated 1" beside re-observed tens
		{0, []int64{25}, true},         // a forged "0 duplicates": 25/4 − 5 = 1.25
		{0, []int64{25, 9}, false},     // 9/4 − 5 < 0: a small count is never flagged for 0
		{50, []int64{129, 151}, false}, // the spread measured between honest runs
		{33, []int64{151}, false},      // 151/4 − 5 = 32.75
		{32, []int64{151}, true},
		{609, []int64{151}, false}, // 4·151 + 5
		{610, []int64{151}, true},
		{0, []int64{0, 0}, false},
		{5, []int64{0}, false}, // the slack: a few where none were seen
		{6, []int64{0}, true},
		{7, nil, false},
	} {
		if got := far(tt.recorded, tt.again); got != tt.want {
			t.Errorf("far(%d, %v) = %v, want %v", tt.recorded, tt.again, got, tt.want)
		}
	}
}

// Ensure the runner invocations -reproduce makes are the recorded
// selection and knobs: run 1 the whole selection, later runs one per
// non-deterministic experiment; and that a selection no invocation makes
// is refused.
func TestReproducePlan(t *testing.T) {
	const fixture = "../../cmd/audit/testdata/fixture"
	for _, tt := range []struct {
		folder string
		full   string
		extra  []string
	}{
		{"evidence", "-duration=1s", []string{"-experiment retries -duration=1s", "-experiment chaos -duration=1s"}},
		{"chaos", "-experiment chaos -duration=1s", []string{"-experiment chaos -duration=1s"}},
		{"volatile", "-store volatile -experiment none", nil},
	} {
		full, extra, err := reproducePlan(fixture, fixture+"/"+tt.folder)
		if err != nil {
			t.Fatalf("%s: %v", tt.folder, err)
		}
		var got []string
		for _, e := range extra {
			got = append(got, strings.Join(e, " "))
		}
		if g := strings.Join(full, " "); g != tt.full || !slices.Equal(got, tt.extra) {
			t.Errorf("%s: plan = %q, %q; want %q, %q", tt.folder, g, got, tt.full, tt.extra)
		}
	}
}

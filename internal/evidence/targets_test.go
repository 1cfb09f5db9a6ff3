package evidence

import (
	"testing"

	"idemlab/internal/verdict"
)

// Ensure TARGETS.md's conformance cell names each rule once, in order of
// first appearance, even where two rules alternate call by call.
func TestRules(t *testing.T) {
	f := func(rules ...string) []verdict.Finding {
		var out []verdict.Finding
		for _, r := range rules {
			out = append(out, verdict.Finding{Rule: r})
		}
		return out
	}
	tests := []struct {
		in   []verdict.Finding
		want string
	}{
		{nil, "—"},
		{f("retry_after", "retry_after", "replay_marker"), "retry_after, replay_marker"},
		{f("in_flight_status", "retry_after", "in_flight_status", "retry_after"), "in_flight_status, retry_after"},
	}
	for _, tt := range tests {
		if got := rules(tt.in); got != tt.want {
			t.Errorf("rules(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

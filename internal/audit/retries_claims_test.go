package audit

import (
	"slices"
	"strings"
	"testing"
)

// lessonCounts gives the fixture's client-side rows the sent and refused
// counts of a real run (runner, seed 1), which the cross-row claims need.
func lessonCounts(t *testing.T, f *fixture) {
	t.Helper()
	counts := map[string][2]int{ // sent, refused
		"retry-4xx": {900, 33}, "retry-retryable": {847, 16},
		"ignore-retry-after": {976, 63}, "honour-retry-after": {856, 26},
		"retry-3-layers": {1234, 0}, "retry-1-layer": {508, 0},
	}
	f.editJSON(t, "evidence/retries.json", func(doc map[string]any) {
		for _, r := range doc["rows"].([]any) {
			row := r.(map[string]any)
			if c, ok := counts[row["client"].(string)]; ok {
				row["sent"], row["refused"] = c[0], c[1]
			}
		}
	})
}

// Ensure each new row's claim, forged, fails naming the row.
func TestRetriesClaimsForged(t *testing.T) {
	for _, tt := range []struct {
		client, field string
		value         int
		want          string
	}{
		{"retry-4xx", "refused", 16, "row retry-4xx/sound: refused: expected > retry-retryable's refused (16)"},
		{"retry-retryable", "refused", 21, "row retry-retryable/sound: refused: expected <= intents / collide_every = 20"},
		{"retry-retryable", "lost", 19, "row retry-retryable/sound: lost: expected >= intents / collide_every = 20"},
		{"retry-4xx", "duplicated", 1, "row retry-4xx/sound: duplicated: expected 0"},
		{"honour-retry-after", "refused", 63, "row honour-retry-after/sound: refused: expected < ignore-retry-after's refused (63)"},
		{"ignore-retry-after", "duplicated", 2, "row ignore-retry-after/sound: duplicated: expected 0"},
		{"retry-3-layers", "sent", 508, "row retry-3-layers/sound: sent: expected > retry-1-layer's sent (508)"},
		{"retry-3-layers", "sent", 5401, "row retry-3-layers/sound: sent: expected <= intents × layer_attempts^layers = 5400"},
		{"retry-1-layer", "sent", 601, "row retry-1-layer/sound: sent: expected <= intents × layer_attempts = 600"},
		{"retry-3-layers", "duplicated", 1, "row retry-3-layers/sound: duplicated: expected 0"},
		{"retry-new-key", "duplicated", 0, "row retry-new-key/sound: duplicated: expected > 0"},
		{"restart-key-in-memory", "duplicated", 0, "row restart-key-in-memory/sound: duplicated: expected > 0"},
		{"restart-key-in-file", "lost", 3, "row restart-key-in-file/sound: lost: expected 0 (the key survives the restart)"},
		{"restart-key-in-file", "duplicated", 1, "row restart-key-in-file/sound: duplicated: expected 0"},
	} {
		t.Run(tt.client+" "+tt.field, func(t *testing.T) {
			f := newFixture(t)
			addExperiments(t, f)
			f.editJSON(t, "evidence/retries.json", func(doc map[string]any) {
				for _, r := range doc["rows"].([]any) {
					if row := r.(map[string]any); row["client"] == tt.client {
						row[tt.field] = tt.value
					}
				}
			})
			f.rehash(t)
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(r.Failures, func(x Failure) bool { return strings.Contains(x.Message, tt.want) }) {
				t.Errorf("failures = %v, want one containing %q", messages(r), tt.want)
			}
		})
	}
}

// Ensure the runner's flags are accepted within their ranges and the fixed
// parameters still must be the design's.
func TestRetriesParamsFlags(t *testing.T) {
	for _, tt := range []struct {
		name  string
		value any
		want  string
	}{
		{"drop_percent", 50, ""},
		{"client_timeout_ms", 200, ""},
		{"max_attempts", 5000, "parameters: max_attempts: expected 1..1000 (runner -flag), observed 5000"},
		{"layers", 2, "parameters: layers: expected 3 (the design's), observed 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			addExperiments(t, f)
			f.editJSON(t, "evidence/retries.json", func(doc map[string]any) {
				doc["parameters"].(map[string]any)[tt.name] = tt.value
			})
			f.rehash(t)
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			got := messages(r)
			if tt.want == "" {
				if len(got) > 0 {
					t.Errorf("failures = %q, want none", got)
				}
				return
			}
			if !slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, tt.want) }) {
				t.Errorf("failures = %q, want one containing %q", got, tt.want)
			}
		})
	}
}

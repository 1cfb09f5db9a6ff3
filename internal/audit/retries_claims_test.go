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
	t.Parallel()
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
			r := auditRetries(t, func(doc map[string]any) {
				for _, r := range doc["rows"].([]any) {
					if row := r.(map[string]any); row["client"] == tt.client {
						row[tt.field] = tt.value
					}
				}
			}, nil)
			if !slices.ContainsFunc(r.Failures, func(x Failure) bool { return strings.Contains(x.Message, tt.want) }) {
				t.Errorf("failures = %v, want one containing %q", messages(r), tt.want)
			}
		})
	}
}

// Ensure a parameter is the design's unless manifest.flags records the
// knob that changed it, and then exactly the recorded value; the fixed
// parameters must be the design's whatever the flags say.
func TestRetriesParamsFlags(t *testing.T) {
	for _, tt := range []struct {
		name  string
		value any
		flags map[string]string
		want  string
	}{
		{"drop_percent", 50, nil, "retries.json: parameters: drop_percent: expected 15 (the design's; manifest.json flags records no drop-percent), observed 50"},
		{"drop_percent", 15, map[string]string{"drop-percent": "50"}, "retries.json: parameters: drop_percent: expected 50 (manifest.json flags.drop-percent), observed 15"},
		{"client_timeout_ms", 30, map[string]string{"timeout-ms": "030"}, `manifest.json: flags.timeout-ms: "030": want a decimal integer in 1..60000`},
		{"max_attempts", 30, map[string]string{"attempts": "5000"}, `manifest.json: flags.attempts: "5000": want a decimal integer in 1..100`},
		{"max_attempts", 30, map[string]string{"duration": "1s"}, `manifest.json: flags.duration: "1s" recorded, but selection.experiments runs no chaos`},
		{"layers", 2, nil, "retries.json: parameters: layers: expected 3 (the design's), observed 2"},
		{"seed", 1, map[string]string{"seed": "7"}, "retries.json: seed: expected 7 (manifest.json flags.seed), observed 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := auditRetries(t, func(doc map[string]any) {
				if tt.name == "seed" {
					doc["seed"] = tt.value
				} else {
					doc["parameters"].(map[string]any)[tt.name] = tt.value
				}
			}, tt.flags)
			if got := messages(r); !slices.Contains(got, tt.want) {
				t.Errorf("failures = %q, want %q among them", got, tt.want)
			}
		})
	}
}

// Ensure recorded knobs within their ranges pass, the parameters holding
// their values.
func TestRetriesParamsFlagsPass(t *testing.T) {
	r := auditRetries(t, func(doc map[string]any) {
		doc["parameters"].(map[string]any)["client_timeout_ms"] = 200
		doc["parameters"].(map[string]any)["workers"] = 3
	}, map[string]string{"timeout-ms": "200", "workers": "3"})
	if got := messages(r); len(got) > 0 {
		t.Errorf("failures = %q, want none", got)
	}
}

// Ensure never-retry's sent is re-derived from the seed, its lost bounded
// by the dropped intents, and that halving the intents with scaled counts
// (manifest.flags recording it) is caught by the same derivation.
func TestNeverRetryDerived(t *testing.T) {
	for _, tt := range []struct {
		name  string
		edit  func(doc map[string]any)
		flags map[string]string
		want  string
	}{
		{"sent one more", func(d map[string]any) { retriesRowOf(d, 0)["sent"] = 180 },
			nil, "retries.json: row never-retry/sound: sent: expected 179 (the intents whose one attempt seed 1 does not drop: 21 of 200 dropped), observed 180"},
		{"lost below the drops", func(d map[string]any) {
			r := retriesRowOf(d, 0)
			r["lost"], r["applied_once"] = 20, 180
		}, nil, "retries.json: row never-retry/sound: lost: expected >= 21 (the intents seed 1 drops before their one attempt), observed 20"},
		{"intents halved, counts scaled", func(d map[string]any) {
			d["parameters"].(map[string]any)["intents"] = 100
			for i := range 13 {
				r := retriesRowOf(d, i)
				lost, dup := num(r["lost"])/2, num(r["duplicated"])/2
				r["lost"], r["duplicated"], r["applied_once"] = lost, dup, 100-lost-dup
				r["sent"], r["refused"] = num(r["sent"])/2, num(r["refused"])/2
			}
		}, map[string]string{"intents": "100"}, "retries.json: row never-retry/sound: sent: expected 91 (the intents whose one attempt seed 1 does not drop: 9 of 100 dropped), observed 89"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := auditRetries(t, tt.edit, tt.flags)
			if got := messages(r); !slices.Contains(got, tt.want) {
				t.Errorf("failures = %q, want %q among them", got, tt.want)
			}
		})
	}
}

// Ensure a claim that holds at the design's parameters only is skipped,
// and named in a note, when a recorded knob moves one it depends on; and
// that with no failure possible nothing may be lost or duplicated.
func TestRetriesClaimsFollowParameters(t *testing.T) {
	r := auditRetries(t, func(d map[string]any) {
		p := d["parameters"].(map[string]any)
		p["drop_percent"], p["client_timeout_ms"] = 0, 5000
		r := retriesRowOf(d, 0) // never-retry: with no drop it sends every intent
		r["sent"] = 200
	}, map[string]string{"drop-percent": "0", "timeout-ms": "5000"})
	got := messages(r)
	for _, want := range []string{
		"retries.json: row never-retry/sound: lost: expected 0 (no drop, no deadline, a timeout well above the delay: nothing can be lost), observed 43",
		"retries.json: row retry-no-key/sound: duplicated: expected 0 (no drop, no deadline, a timeout well above the delay: no attempt fails, none is retried), observed 79",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("failures = %q, want %q among them", got, want)
		}
	}
	if slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, "expected > 0") }) {
		t.Errorf("failures = %q: a duplicate claim of the design's parameters was checked with -timeout-ms moved", got)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool {
		return strings.Contains(n, "retry-no-key/sound duplicated (moved: -drop-percent -timeout-ms)")
	}) {
		t.Errorf("notes = %q, want the skipped claims named", r.Notes)
	}
}

// auditRetries audits the experiments fixture with retries.json changed by
// edit and, unless nil, manifest.flags set to flags (as a run with those
// knobs records them), every hash made to agree.
func auditRetries(t *testing.T, edit func(doc map[string]any), flags map[string]string) *Report {
	t.Helper()
	f := newExperimentsFixture(t)
	f.editJSON(t, "evidence/retries.json", edit)
	if flags != nil {
		f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["flags"] = flags })
	}
	f.rehash(t)
	r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

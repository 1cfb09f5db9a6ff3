package audit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// newExperimentsFixture returns a fresh copy of the store fixture with
// the experiments added (addExperiments).
func newExperimentsFixture(t *testing.T) *fixture {
	t.Helper()
	return fromTemplate(t, "experiments", func(t *testing.T) *fixture {
		f := buildFixture(t)
		addExperiments(t, f)
		return f
	})
}

// addExperiments puts a passing retries.json and the corpus jitter.json
// and jitter.svg (testdata/spec/jitter: the bytes the lab's own jitter
// package writes, not this package's model and drawing) into the
// fixture's evidence and lists them in the manifest.
func addExperiments(t *testing.T, f *fixture) {
	t.Helper()
	f.writeJSON(t, "evidence/retries.json", map[string]any{
		"schema_version": 1,
		"seed":           1,
		"parameters": map[string]any{
			"intents": 200, "workers": 10, "drop_percent": 15, "client_timeout_ms": 30,
			"max_server_delay_ms": 60, "max_attempts": 30, "backoff_base_ms": 5, "backoff_cap_ms": 100,
			"total_deadline_ms": 0, "collide_every": 10, "shed_inflight": 4, "retry_after_s": 1, "layers": 3, "layer_attempts": 3,
		},
		"rows": []any{
			retriesRowDoc("never-retry", "sound", 43, 157, 0),
			retriesRowDoc("retry-no-key", "sound", 0, 121, 79),
			retriesRowDoc("retry-same-key", "sound", 0, 200, 0),
			retriesRowDoc("retry-same-key", "record-after-effect", 0, 150, 50),
			retriesRowDoc("retry-4xx", "sound", 20, 180, 0),
			retriesRowDoc("retry-retryable", "sound", 20, 180, 0),
			retriesRowDoc("ignore-retry-after", "sound", 16, 184, 0),
			retriesRowDoc("honour-retry-after", "sound", 1, 199, 0),
			retriesRowDoc("retry-3-layers", "sound", 0, 200, 0),
			retriesRowDoc("retry-1-layer", "sound", 7, 193, 0),
			retriesRowDoc("retry-new-key", "sound", 0, 9, 191),
			retriesRowDoc("restart-key-in-memory", "sound", 0, 52, 148),
			retriesRowDoc("restart-key-in-file", "sound", 0, 200, 0),
		},
	})
	// never-retry sends the intents whose one attempt seed 1 does not
	// drop: 179 of 200 (re-derived by checkNeverRetry).
	f.editJSON(t, "evidence/retries.json", func(d map[string]any) { retriesRowOf(d, 0)["sent"] = 179 })
	data, err := os.ReadFile(filepath.Join(specRoot, "jitter", "jitter.json"))
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, "evidence/jitter.json", string(data))
	svg, err := os.ReadFile(filepath.Join(specRoot, "jitter", "jitter.svg"))
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, "evidence/jitter.svg", string(svg))
	lessonCounts(t, f) // retries_claims_test.go
	f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
		m["selection"].(map[string]any)["experiments"] = []string{"retries", "jitter"}
	})
	f.rehash(t)
}

func retriesRowDoc(client, registry string, lost, once, dup int) map[string]any {
	return map[string]any{"client": client, "registry": registry, "lost": lost, "applied_once": once, "duplicated": dup,
		"sent": once + 3*dup + lost, "refused": 0}
}

// retriesRowOf returns row i of retries.json, for edits.
func retriesRowOf(d map[string]any, i int) map[string]any {
	return d["rows"].([]any)[i].(map[string]any)
}

// strategyOf returns strategy i of jitter.json, for edits.
func strategyOf(d map[string]any, i int) map[string]any {
	return d["strategies"].([]any)[i].(map[string]any)
}

// Ensure each experiment rule, broken on its own, fails with one line
// naming the file, the row or strategy, the field, expected and observed;
// and that the lab's own jitter.json and a design-shaped retries.json pass.
func TestAuditExperiments(t *testing.T) {
	t.Parallel()
	tests := []auditCase{
		{name: "pass", mutate: func(t *testing.T, f *fixture) {}},
		{
			name: "pass/unlisted experiments are not checked (but are unlisted files)",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					files := m["files"].(map[string]any)
					delete(files, "retries.json")
					delete(files, "jitter.json")
				})
				f.write(t, "evidence/retries.json", "not even JSON")
				f.derive(t)
			},
			want: []string{
				"file jitter.json: not listed in the manifest",
				"file retries.json: not listed in the manifest",
			},
		},
		{
			name: "pass/an experiment-only folder needs no case runs",
			mutate: func(t *testing.T, f *fixture) {
				os.Remove(f.path("evidence/results.json"))
				os.Remove(f.path("evidence/run.json"))
				os.Remove(f.path("evidence/REPORT.md"))
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["selection"] = map[string]any{"cases": []string{}, "stores": []string{}, "targets": []string{}, "experiments": []string{"jitter"}}
				})
				os.Remove(f.path("evidence/retries.json"))
				f.rehash(t)
			},
		},
		{
			name:   "pass/an experiment-only folder with -store (as the runner calls it)",
			mutate: experimentsOnly("retries", "jitter"),
			opts:   func(o *Options) { o.Store = "volatile" },
		},
		{
			name:   "an experiment-only folder audited with -case misses that case's run",
			mutate: experimentsOnly("retries", "jitter"),
			opts:   func(o *Options) { o.Case = "body_conflict" },
			want:   []string{"case body_conflict, store volatile: missing run"},
		},
		{
			name:   "experiment-only folder: the selection must match the files",
			mutate: experimentsOnly("retries"),
			want:   []string{"manifest.json: selection.experiments: lists no jitter, but manifest.files lists jitter.json"},
		},
		{
			name: "a folder that selects no cases and no experiment claims nothing",
			mutate: func(t *testing.T, f *fixture) {
				os.Remove(f.path("evidence/results.json"))
				os.Remove(f.path("evidence/retries.json"))
				os.Remove(f.path("evidence/jitter.json"))
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["selection"] = map[string]any{"cases": []string{}, "stores": []string{}, "targets": []string{}, "experiments": []string{}}
				})
				f.rehash(t)
			},
			want: []string{
				"file run.json: listed in the manifest, but the selection runs no case on a store, and the runner writes it for those only",
				"manifest.json: selection: selects no case and no experiment: the evidence claims nothing",
			},
			more: true,
		},

		// retries.json
		{
			name: "retries/never-retry duplicated",
			mutate: rehashed("retries.json", func(d map[string]any) {
				r := retriesRowOf(d, 0)
				r["applied_once"], r["duplicated"] = 154, 3
			}),
			want: []string{"retries.json: row never-retry/sound: duplicated: expected 0, observed 3"},
		},
		{
			name: "retries/retry-no-key lost",
			mutate: rehashed("retries.json", func(d map[string]any) {
				r := retriesRowOf(d, 1)
				r["lost"], r["applied_once"] = 2, 119
			}),
			want: []string{"retries.json: row retry-no-key/sound: lost: expected 0, observed 2"},
		},
		{
			name: "retries/retry-same-key sound lost and duplicated",
			mutate: rehashed("retries.json", func(d map[string]any) {
				r := retriesRowOf(d, 2)
				r["lost"], r["applied_once"], r["duplicated"], r["sent"] = 1, 196, 3, 210
			}),
			want: []string{
				"retries.json: row retry-same-key/sound: lost: expected 0, observed 1",
				"retries.json: row retry-same-key/sound: duplicated: expected 0, observed 3",
			},
		},
		{
			name: "retries/record-after-effect does not duplicate",
			mutate: rehashed("retries.json", func(d map[string]any) {
				r := retriesRowOf(d, 3)
				r["applied_once"], r["duplicated"] = 200, 0
			}),
			want: []string{"retries.json: row retry-same-key/record-after-effect: duplicated: expected > 0, observed 0"},
		},
		{
			name:   "retries/counts do not add up to the intents",
			mutate: rehashed("retries.json", func(d map[string]any) { retriesRowOf(d, 0)["lost"] = 44 }),
			want:   []string{"retries.json: row never-retry/sound: lost+applied_once+duplicated: expected 200 (parameters.intents), observed 201"},
		},
		{
			name: "retries/missing row",
			mutate: rehashed("retries.json", func(d map[string]any) {
				d["rows"] = d["rows"].([]any)[:3]
			}),
			want: []string{"retries.json: rows: expected the design's 13 rows in its order, observed 3: rows[3] is (none), want retry-same-key/record-after-effect"},
		},
		{
			name: "retries/duplicate and unexpected rows",
			mutate: rehashed("retries.json", func(d map[string]any) {
				rows := d["rows"].([]any)
				d["rows"] = append(rows, rows[1], retriesRowDoc("never-retry", "record-after-effect", 200, 0, 0))
			}),
			want: []string{"retries.json: rows: expected the design's 13 rows in its order, observed 15: rows[13] is retry-no-key/sound, want (none)"},
		},
		{
			name: "retries/sent fewer attempts than the intents applied need",
			mutate: rehashed("retries.json", func(d map[string]any) {
				r := retriesRowOf(d, 1)
				r["sent"], r["refused"] = 100, 101
			}),
			want: []string{
				"retries.json: row retry-no-key/sound: sent: expected >= applied_once + 2 × duplicated = 279, observed 100",
				"retries.json: row retry-no-key/sound: refused: expected <= sent (100), observed 101",
			},
		},
		{
			name:   "retries/schema",
			mutate: rehashed("retries.json", func(d map[string]any) { retriesRowOf(d, 0)["lost"] = -1 }),
			want:   []string{"retries.json: /rows/0/lost: must be >= 0 but found -1"},
			note:   "retries.json is missing or invalid: its checks were not made",
		},
		{
			name:   "retries/unknown client",
			mutate: rehashed("retries.json", func(d map[string]any) { retriesRowOf(d, 0)["client"] = "retry-forever" }),
			want:   []string{`retries.json: /rows/0/client: value must be one of "never-retry", "retry-no-key", "retry-same-key", "retry-4xx", "retry-retryable", "ignore-retry-after", "honour-retry-after", "retry-3-layers", "retry-1-layer", "retry-new-key", "restart-key-in-memory", "restart-key-in-file"`},
		},
		{
			name:   "retries/listed but missing",
			mutate: func(t *testing.T, f *fixture) { os.Remove(f.path("evidence/retries.json")) },
			want:   []string{"file retries.json: listed in the manifest but missing from the evidence folder"},
		},

		// jitter.json
		{
			name:   "jitter/peak",
			mutate: rehashed("jitter.json", func(d map[string]any) { strategyOf(d, 1)["peak"] = 156 }),
			want:   []string{"jitter.json: strategy full: peak: expected 157, observed 156"},
		},
		{
			name:   "jitter/total",
			mutate: rehashed("jitter.json", func(d map[string]any) { strategyOf(d, 3)["total"] = 4999 }),
			want:   []string{"jitter.json: strategy decorrelated: total: expected 5000, observed 4999"},
		},
		{
			name: "jitter/a bucket, the first that differs",
			mutate: rehashed("jitter.json", func(d map[string]any) {
				b := strategyOf(d, 2)["buckets"].([]any)
				b[100], b[200] = 999, 999
			}),
			want: []string{"jitter.json: strategy equal: buckets[100]: expected 21, observed 999"},
		},
		{
			name: "jitter/number of buckets",
			mutate: rehashed("jitter.json", func(d map[string]any) {
				s := strategyOf(d, 0)
				s["buckets"] = append(s["buckets"].([]any), 0)
			}),
			want: []string{"jitter.json: strategy none: buckets: expected 311 buckets, observed 312"},
		},
		{
			name: "jitter/parameters",
			mutate: rehashed("jitter.json", func(d map[string]any) {
				d["parameters"].(map[string]any)["seed"] = 7
			}),
			want: []string{"jitter.json: parameters: seed: expected 42, observed 7"},
		},
		{
			name: "jitter/strategies swapped",
			mutate: rehashed("jitter.json", func(d map[string]any) {
				s := d["strategies"].([]any)
				s[1], s[2] = s[2], s[1]
			}),
			want: []string{
				`jitter.json: /strategies/1/name: value must be "full"`,
				`jitter.json: /strategies/2/name: value must be "equal"`,
			},
			note: "jitter.json is missing or invalid: its checks were not made",
		},
	}
	runAuditCases(t, tests, newExperimentsFixture)
}

// experimentsOnly makes the fixture a folder of the named experiments
// alone: no case run (results.json, run.json, REPORT.md gone), the
// manifest's selection saying so.
func experimentsOnly(experiments ...string) func(t *testing.T, f *fixture) {
	return func(t *testing.T, f *fixture) {
		for _, n := range []string{"results.json", "run.json", "REPORT.md"} {
			os.Remove(f.path("evidence/" + n))
		}
		f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
			m["selection"] = map[string]any{"cases": []string{}, "stores": []string{}, "targets": []string{}, "experiments": append([]string{}, experiments...)}
		})
		f.rehash(t)
	}
}

// Ensure the PASS line names the experiments checked.
func TestReportExperiments(t *testing.T) {
	f := newExperimentsFixture(t)
	r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(b.String(), "\n")
	if got, want := first, "4 files and "; !strings.Contains(got, want) || !strings.HasSuffix(got, " sources verified; experiments checked: retries, jitter; partial: experiments: retries, jitter only") {
		t.Errorf("WriteText() = %q, want 4 files and the experiments named at the end", got)
	}
	if got, want := r.Experiments, []string{"retries", "jitter"}; !slices.Equal(got, want) {
		t.Errorf("Report.Experiments = %q, want %q", got, want)
	}
}

// Ensure a failed experiment check carries its parts for -json.
func TestExperimentFailureFields(t *testing.T) {
	f := newExperimentsFixture(t)
	f.editJSON(t, "evidence/jitter.json", func(d map[string]any) { strategyOf(d, 1)["peak"] = 41 })
	f.rehash(t)
	r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
	if err != nil {
		t.Fatal(err)
	}
	want := Failure{Check: CheckExperiment, Field: "peak", Expected: "157", Observed: "41",
		Message: "jitter.json: strategy full: peak: expected 157, observed 41"}
	if len(r.Failures) != 1 || r.Failures[0] != want {
		t.Errorf("Audit().Failures = %+v, want [%+v]", r.Failures, want)
	}
}

// Ensure Compare covers jitter.json: identical, differing (naming the
// strategies), only in one folder; absent from both is no line.
func TestCompareJitter(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(t *testing.T, f *fixture)
		identical bool
		want      []string
	}{
		{name: "identical", mutate: func(t *testing.T, f *fixture) {}, identical: true,
			want: []string{"identical: results.json", "identical: jitter.json", "identical: jitter.svg", "identical: REPORT.md"}},
		{
			name: "a strategy differs",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/jitter.json", func(d map[string]any) { strategyOf(d, 3)["peak"] = 72 })
			},
			want: []string{"identical: results.json", "differs: jitter.json", "jitter.json: strategy decorrelated: differs", "identical: jitter.svg", "identical: REPORT.md"},
		},
		{
			name:   "only in A",
			mutate: func(t *testing.T, f *fixture) { os.Remove(f.path("evidence/jitter.json")) },
			want:   []string{"identical: results.json", "differs: jitter.json (only in A)", "identical: jitter.svg", "identical: REPORT.md"},
		},
		{
			name: "retries.json may differ",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/retries.json", func(d map[string]any) { retriesRowOf(d, 0)["lost"] = 40 })
			},
			identical: true,
			want: []string{"identical: results.json", "identical: jitter.json", "identical: jitter.svg", "identical: REPORT.md",
				"differs as expected (timings, histories, the targets' own timing; not compared byte for byte): retries.json"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newExperimentsFixture(t)
			a := filepath.Join(f.root, "A")
			if err := os.CopyFS(a, os.DirFS(f.evidence)); err != nil {
				t.Fatal(err)
			}
			tt.mutate(t, f)
			c, err := Compare(a, f.evidence)
			if err != nil {
				t.Fatalf("Compare() error = %v", err)
			}
			got := make([]string, len(c.Lines))
			for i, l := range c.Lines {
				got[i] = strings.ReplaceAll(l, a, "A")
			}
			if c.Identical != tt.identical || !slices.Equal(got, tt.want) {
				t.Errorf("Compare() = %v\n%s\nwant %v\n%s", c.Identical, strings.Join(got, "\n"), tt.identical, strings.Join(tt.want, "\n"))
			}
		})
	}
}

package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func messages(r *Report) []string {
	var out []string
	for _, f := range r.Failures {
		out = append(out, f.Message)
	}
	return out
}

// Ensure every rule, broken on its own, fails with a line naming what
// failed, and that intact evidence passes.
func TestAudit(t *testing.T) {
	t.Parallel()
	tests := []auditCase{
		{name: "pass", mutate: func(t *testing.T, f *fixture) {}},
		{
			name: "pass/-case and -store",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) {
					d["runs"] = []any{runOf(d, "body_conflict")}
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["selection"].(map[string]any)["cases"] = []any{"body_conflict"}
				})
				f.syncRunFile(t)
				f.rehash(t)
			},
			opts: func(o *Options) { o.Case, o.Store = "body_conflict", "volatile" },
		},
		{
			name: "pass/crlf source",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "internal/fake/fake.go", "package fake\r\n\r\nconst X = 1\r\n")
			},
		},
		{
			name: "pass/new test file and testdata are no sources",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "internal/fake/new_test.go", "package fake\n")
				f.write(t, "internal/fake/testdata/deep/x.json", "{}\n")
			},
		},
		{
			name: "calls/a refusal's body must be the server's text",
			mutate: rehashed("results.json", func(d map[string]any) {
				call := runOf(d, "body_conflict")["calls"].([]any)[1].(map[string]any)
				call["body"] = "key reused with another body"
			}),
			want: []string{`case body_conflict, store volatile, call 1: reply: expected 422 "Idempotency-Key already used with another request body\n" replayed null (the server's text), observed 422 "key reused with another body" replayed null`},
		},
		{
			name: "calls/step, key and fault must be what the steps send",
			mutate: rehashed("results.json", func(d map[string]any) {
				calls := runOf(d, "capacity_and_input")["calls"].([]any)
				calls[3].(map[string]any)["key"] = "key-7"
				calls[4].(map[string]any)["step"] = 1
				runOf(d, "keyed_lost_reply")["calls"].([]any)[0].(map[string]any)["fault"] = nil
			}),
			want: []string{
				"manifest.json: protocol.capacity: 64, but case capacity_and_input, store volatile accepted 63 distinct keys before its first 429",
				`case keyed_lost_reply, store volatile, call 0: fault: expected "drop-reply" (as the case's steps send), observed null`,
				`case capacity_and_input, store volatile, call 3: key: expected "key-1" (as the case's steps send), observed "key-7"`,
				`case capacity_and_input, store volatile, call 4: step: expected 2 (as the case's steps send), observed 1`,
			},
		},
		{
			name: "calls/a 400 and a 429 rewritten",
			mutate: rehashed("results.json", func(d map[string]any) {
				calls := runOf(d, "capacity_and_input")["calls"].([]any)
				calls[0].(map[string]any)["body"] = "bad\n"
				calls[66].(map[string]any)["body"] = "full\n"
			}),
			want: []string{
				`case capacity_and_input, store volatile, call 0: reply: expected 400 "Idempotency-Key: key has a character outside [A-Za-z0-9_-]\n" replayed null (the server refuses this request), observed 400 "bad\n" replayed null`,
				`case capacity_and_input, store volatile, call 66: reply: expected 429 "Idempotency-Key registry is full\n" replayed null (the server's text), observed 429 "full\n" replayed null`,
			},
		},
		{
			name: "pass/dirty tree with -allow-dirty is a note",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["source_dirty"] = true })
				f.rehash(t)
			},
			opts: func(o *Options) { o.AllowDirty = true },
			note: "the evidence came from a checkout with uncommitted changes (manifest.json source_dirty: true), accepted with -allow-dirty",
		},
		{
			name: "manifest/dirty tree fails",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["source_dirty"] = true })
				f.rehash(t)
			},
			want: []string{"manifest.json: source_dirty: true: the evidence came from a checkout with uncommitted changes (pass -allow-dirty to accept it)"},
		},
		{
			name: "manifest/mutation run fails without -allow-mutation",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["unsafe_registry"] = "no-fingerprint" })
				f.derive(t)
			},
			want: []string{`manifest.json: unsafe_registry: "no-fingerprint": mutation run, not reference evidence (pass -allow-mutation to audit it as one)`},
		},
		{
			name: "pass/mutation run with -allow-mutation",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["unsafe_registry"] = "no-fingerprint" })
				f.derive(t)
			},
			opts: func(o *Options) { o.AllowMutation = true },
			note: `mutation run: every server ran the deliberately broken registry "no-fingerprint" (accepted with -allow-mutation)`,
		},
		{
			name: "manifest/protocol constants",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					p := m["protocol"].(map[string]any)
					p["capacity"], p["crash_exit_code"], p["max_body"], p["wait_ms"] = 65, 99, 1, 5001
				})
				f.derive(t)
			},
			want: []string{
				"manifest.json: protocol.capacity: expected 64 (DefaultCapacity in internal/protocol), observed 65",
				"manifest.json: protocol.max_body: expected 4096 (DefaultMaxBody in internal/protocol), observed 1",
				"manifest.json: protocol.wait_ms: expected 5000 (DefaultWait in internal/protocol), observed 5001",
				"manifest.json: protocol.crash_exit_code: expected 23 (CrashExitCode in internal/protocol), observed 99",
				"case crash_after_effect, store volatile: exit_codes[0]: expected 99, protocol.crash_exit_code (a crash fault fired in that server), observed 23",
				"manifest.json: protocol.capacity: 65, but case capacity_and_input, store volatile accepted 64 distinct keys before its first 429",
			},
			more: true,
		},
		{
			name: "manifest/go_version, os_arch and generated_utc must look like what they claim",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["go_version"], m["os_arch"], m["generated_utc"] = "go1.26 evil", "linux/amd65", "2025-13-01T00:00:00Z"
				})
				f.derive(t)
			},
			want: []string{
				`manifest.json: generated_utc: "2025-13-01T00:00:00Z" is not a UTC time (YYYY-MM-DDTHH:MM:SSZ)`,
				`manifest.json: go_version: "go1.26 evil" is not a Go release (go1.N or go1.N.P)`,
				`manifest.json: os_arch: "linux/amd65" is not a GOOS/GOARCH pair`,
			},
		},

		// 1. Schemas.
		{
			name: "schema/results counter is a string",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) { run(d, 0)["counter"] = "2" })
				f.rehash(t)
			},
			want: []string{"results.json: /runs/0/counter: expected integer, but got string"},
			note: "results.json is missing or invalid: the run set, the expectations and the calls were not checked",
		},
		{
			name: "schema/results has every leaf cause, sorted",
			mutate: rehashed("results.json", func(d map[string]any) {
				run(d, 1)["store"] = "sharded"
				run(d, 0)["counter"] = -1
			}),
			want: []string{
				"results.json: /runs/0/counter: must be >= 0 but found -1",
				"results.json: /runs/1/store: value must be one of \"volatile\", \"durable\", \"postgres\"",
			},
		},
		{
			name: "schema/results not JSON",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "evidence/results.json", "{\"runs\": [\n")
				f.rehash(t)
			},
			want: []string{"results.json: not valid JSON: unexpected EOF"},
		},
		{
			name: "schema/manifest misses a field",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { delete(m, "go_version") })
				f.derive(t)
			},
			want: []string{"manifest.json: (root): missing properties: 'go_version'"},
		},
		{
			name: "schema/run.json invalid",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/run.json", func(m map[string]any) { m["parallel"] = 0 })
				f.rehash(t)
			},
			want: []string{"run.json: /parallel: must be >= 1 but found 0"},
		},
		{
			name: "schema/run.json missing",
			mutate: func(t *testing.T, f *fixture) {
				os.Remove(f.path("evidence/run.json"))
			},
			want: []string{"file run.json: listed in the manifest but missing from the evidence folder"},
		},

		// 2. Files.
		{
			name: "file/flipped byte",
			mutate: func(t *testing.T, f *fixture) {
				data, _ := os.ReadFile(f.path("evidence/run.json"))
				data[bytes.Index(data, []byte(": start"))+2] ^= 1 // "start" becomes "rtart": a log line the audit does not read
				os.WriteFile(f.path("evidence/run.json"), data, 0o644)
			},
			want: []string{"file run.json: SHA-256 does not match the manifest"},
		},
		{
			name: "file/unlisted, also in a subfolder",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "evidence/extra.txt", "x")
				f.write(t, "evidence/sub/more.txt", "x")
			},
			want: []string{"file extra.txt: not listed in the manifest", "file sub/more.txt: not listed in the manifest"},
		},
		{
			name: "file/results.json not listed",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					delete(m["files"].(map[string]any), "results.json")
				})
				f.derive(t)
			},
			want: []string{"file results.json: not listed in the manifest"},
		},
		{
			name: "file/path escapes the folder",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["files"].(map[string]any)["../go.mod"] = strings.Repeat("a", 64)
				})
				f.derive(t)
			},
			want: []string{"file ../go.mod: not a clean relative path"},
		},

		// 3. Sources.
		{
			name: "source/edited",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "internal/fake/fake.go", "package fake\n\nconst X = 2\n")
			},
			want: []string{"source internal/fake/fake.go: SHA-256 does not match the checkout"},
		},
		{
			name:   "source/missing",
			mutate: func(t *testing.T, f *fixture) { os.Remove(f.path("cmd/fake/main.go")) },
			want:   []string{"source cmd/fake/main.go: missing from the checkout"},
		},
		{
			name: "source/unlisted",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "internal/fake/new.go", "package fake\n")
				f.write(t, "schema/new.txt", "x\n")
			},
			want: []string{
				"source internal/fake/new.go: not listed in the manifest",
				"source schema/new.txt: not listed in the manifest",
			},
		},

		// 4. Run set.
		{
			name: "runset/dropped run",
			mutate: rehashed("results.json", func(d map[string]any) {
				runs := d["runs"].([]any)
				d["runs"] = append(runs[:3:3], runs[4:]...)
			}),
			want: []string{
				"case body_conflict, store volatile: missing run",
				"run.json: runs: expected the runs of results.json in its order (6 runs), observed 7 runs: runs[3] is case body_conflict, store volatile, want case restart_after_reply, store volatile",
			},
		},
		{
			name: "runset/duplicate run",
			mutate: rehashed("results.json", func(d map[string]any) {
				runs := d["runs"].([]any)
				d["runs"] = append(runs, runs[len(runs)-1])
			}),
			want: []string{"case capacity_and_input, store volatile: duplicate run (runs[7])"},
			more: true,
		},
		{
			name: "runset/out of order",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) {
					runs := d["runs"].([]any)
					runs[0], runs[1] = runs[1], runs[0]
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					c := m["selection"].(map[string]any)["cases"].([]any)
					c[0], c[1] = c[1], c[0]
				})
				f.rehash(t)
			},
			want: []string{
				`manifest.json: selection.cases: "unkeyed_lost_reply" out of case-file order`,
				"case unkeyed_lost_reply, store volatile: out of order (after case keyed_lost_reply, store volatile; runs go in case-file order, then store order)",
			},
			more: true,
		},
		{
			name: "runset/extra run",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) {
					runs := d["runs"].([]any)
					extra := map[string]any{}
					for k, v := range run(d, 0) {
						extra[k] = v
					}
					extra["store"] = "durable"
					d["runs"] = append([]any{runs[0], extra}, runs[1:]...)
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["selection"].(map[string]any)["stores"] = []any{"volatile", "durable"}
				})
				f.rehash(t)
			},
			want: []string{"case unkeyed_lost_reply, store durable: cases/10-unkeyed_lost_reply.json has no expectation for this store"},
			more: true,
		},
		{
			name: "runset/missing case: a new case file the evidence does not cover",
			mutate: func(t *testing.T, f *fixture) {
				data, _ := os.ReadFile(f.path("cases/20-keyed_lost_reply.json"))
				f.write(t, "cases/80-keyed_again.json", strings.Replace(string(data), `"keyed_lost_reply"`, `"keyed_again"`, 1))
			},
			want: []string{"source cases/80-keyed_again.json: not listed in the manifest"},
		},
		{
			name: "runset/a case lacks an expectation for a required store",
			mutate: func(t *testing.T, f *fixture) {
				data, _ := os.ReadFile(f.path("cases/40-body_conflict.json"))
				f.write(t, "cases/40-body_conflict.json", strings.Replace(string(data), `"volatile": {`, `"durable": {"counter": 1, "exit_codes": [0], "calls": []}, "volatile": {`, 1))
				f.rehash(t)
			},
			want: nil, // the selection names volatile only
		},
		{
			name: "runset/-store names a store no case expects",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) { d["runs"] = []any{} })
				f.rehash(t)
			},
			opts: func(o *Options) { o.Case, o.Store = "body_conflict", "durable" },
			want: []string{
				"case body_conflict, store durable: cases/40-body_conflict.json has no expectation for this store",
				"case unkeyed_lost_reply, store volatile: missing run",
			},
			more: true,
		},
		{
			name: "runset/selection disagrees with the runs",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["selection"].(map[string]any)["stores"] = []any{"volatile", "durable"}
				})
				f.derive(t)
			},
			want: []string{
				"case unkeyed_lost_reply, store durable: cases/10-unkeyed_lost_reply.json has no expectation for this store",
			},
			more: true,
		},

		// 5. Expectations.
		{
			name: "expectation/counter",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) { runOf(d, "unkeyed_lost_reply")["counter"] = 3 })
				f.rehash(t)
			},
			want: []string{"case unkeyed_lost_reply, store volatile: counter: expected 2, observed 3"},
		},
		{
			name: "expectation/exit codes",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) { runOf(d, "crash_after_effect")["exit_codes"] = []int{0} })
				f.rehash(t)
			},
			want: []string{
				"case crash_after_effect, store volatile: exit_codes: expected [23,0], observed [0]",
				"case crash_after_effect, store volatile: exit_codes: expected 2 (one per server process the steps start), observed 1",
			},
			more: true,
		},
		{
			name: "expectation/number of calls",
			mutate: rehashed("results.json", func(d map[string]any) {
				r := runOf(d, "keyed_lost_reply")
				r["calls"] = r["calls"].([]any)[:1]
			}),
			want: []string{
				"case keyed_lost_reply, store volatile: calls: expected 2, observed 1",
				"case keyed_lost_reply, store volatile: calls: expected 2 (as cases/20-keyed_lost_reply.json's steps send), observed 1",
			},
			more: true,
		},
		{
			name: "expectation/replayed",
			mutate: rehashed("results.json", func(d map[string]any) {
				runOf(d, "keyed_lost_reply")["calls"].([]any)[1].(map[string]any)["replayed"] = false
			}),
			want: []string{"case keyed_lost_reply, store volatile, call 1: replayed: expected true, observed false"},
		},
		{
			name: "expectation/outcome, status and a repeated body",
			mutate: rehashed("results.json", func(d map[string]any) {
				calls := runOf(d, "capacity_and_input")["calls"].([]any)
				calls[7].(map[string]any)["body"] = "5"
				calls[0].(map[string]any)["status"] = 200
				calls[66].(map[string]any)["outcome"] = "timeout"
				calls[66].(map[string]any)["status"] = nil
				calls[66].(map[string]any)["body"] = nil
			}),
			want: []string{
				"case capacity_and_input, store volatile, call 0: status: expected 400, observed 200",
				`case capacity_and_input, store volatile, call 7: body: expected "6", observed "5"`,
				`case capacity_and_input, store volatile, call 66: outcome: expected "reply", observed "timeout"`,
				"case capacity_and_input, store volatile, call 66: status: expected 429, observed null",
			},
			more: true,
		},

		// 10. Derived files: what the audit writes itself (audit -write),
		// compared byte for byte, never listed.
		{
			name: "derived/a flipped byte in REPORT.md",
			mutate: func(t *testing.T, f *fixture) {
				data := mustRead(t, f.path("evidence/REPORT.md"))
				data[0] ^= 1
				f.write(t, "evidence/REPORT.md", string(data))
			},
			want: []string{`REPORT.md: differs from the audit's own rendering: line 1: expected "# idemlab report", observed "\" idemlab report"`},
		},
		{
			name:   "derived/REPORT.md missing",
			mutate: func(t *testing.T, f *fixture) { os.Remove(f.path("evidence/REPORT.md")) },
			want:   []string{"REPORT.md: missing: the audit derives it from the observations (audit -write writes it)"},
		},
		{
			name: "derived/verdicts.json says a forged run matches",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) { runOf(d, "unkeyed_lost_reply")["counter"] = 3 })
				f.rehash(t)
				data := string(mustRead(t, f.path("evidence/"+VerdictsFile)))
				forged := strings.Replace(data, `"matches": false,
      "mismatches": [
        "counter: expected 2, observed 3"
      ]`, `"matches": true,
      "mismatches": []`, 1)
				if forged == data {
					t.Fatalf("verdicts.json holds no mismatch of unkeyed_lost_reply to forge:\n%s", data)
				}
				f.write(t, "evidence/"+VerdictsFile, forged)
			},
			want: []string{
				"case unkeyed_lost_reply, store volatile: counter: expected 2, observed 3",
				`verdicts.json: differs from the audit's own rendering: line 7: expected "      \"matches\": false,", observed "      \"matches\": true,"`,
			},
		},
		{
			name: "derived/a derived file listed in the manifest",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["files"].(map[string]any)["REPORT.md"] = sha256Hex(mustRead(t, f.path("evidence/REPORT.md")))
				})
				f.derive(t)
			},
			want: []string{"file REPORT.md: listed in the manifest, but the audit derives it from the observations: the runner lists what it observed"},
		},
		{
			name:   "derived/a rendering the selection does not derive",
			mutate: func(t *testing.T, f *fixture) { f.write(t, "evidence/TARGETS.md", "# idemlab targets\n") },
			want:   []string{"file TARGETS.md: not listed in the manifest, and not a file the audit derives for this selection"},
		},
		{
			name: "every failure, in check order",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) { runOf(d, "keyed_lost_reply")["counter"] = 2 })
				f.write(t, "internal/fake/fake.go", "package fake\n")
				f.derive(t)
				os.Remove(f.path("evidence/" + VerdictsFile))
			},
			want: []string{
				"file results.json: SHA-256 does not match the manifest",
				"source internal/fake/fake.go: SHA-256 does not match the checkout",
				"case keyed_lost_reply, store volatile: counter: expected 1, observed 2",
				"verdicts.json: missing: the audit derives it from the observations (audit -write writes it)",
			},
		},
	}
	runAuditCases(t, tests, newFixture)
}

// An auditCase is one row of a table of forgeries: a fixture changed by
// mutate, audited with opts, and the failure lines and note it must give.
type auditCase struct {
	name   string
	mutate func(t *testing.T, f *fixture)
	opts   func(o *Options)
	want   []string // exact failure lines, in order; nil: pass
	more   bool     // want lists only the first lines, more may follow
	note   string   // a note that must be printed
}

// rehashed edits the evidence's JSON file name with edit, then rehashes
// the manifest: a forgery of the file whose hashes are made to agree.
func rehashed(name string, edit func(d map[string]any)) func(t *testing.T, f *fixture) {
	return func(t *testing.T, f *fixture) {
		f.editJSON(t, "evidence/"+name, edit)
		f.rehash(t)
	}
}

// runAuditCases runs each row on a fresh fixture made by fixture.
func runAuditCases(t *testing.T, tests []auditCase, fixture func(*testing.T) *fixture) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fixture(t)
			tt.mutate(t, f)
			opts := Options{Root: f.root, Evidence: f.evidence}
			if tt.opts != nil {
				tt.opts(&opts)
			}
			r, err := Audit(opts)
			if err != nil {
				t.Fatalf("Audit() error = %v", err)
			}
			got := messages(r)
			if tt.more && len(got) > len(tt.want) {
				got = got[:len(tt.want)]
			}
			checkReport(t, r, got, tt.want, tt.note)
		})
	}
}

// checkReport compares a report's failure lines (got, possibly trimmed by
// the caller) with want, its verdict with want being empty, and requires
// note among its notes when note is set.
func checkReport(t *testing.T, r *Report, got, want []string, note string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("Audit() failures =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, want := r.Pass, want == nil; got != want {
		t.Errorf("Audit().Pass = %v, want %v", got, want)
	}
	if note != "" && !slices.Contains(r.Notes, note) {
		t.Errorf("Audit().Notes = %q, want %q among them", r.Notes, note)
	}
}

// auditText audits the fixture and returns the report and its text.
func auditText(t *testing.T, f *fixture) (*Report, *bytes.Buffer) {
	t.Helper()
	r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return r, &b
}

// withoutNotes drops the "note: " lines of a text report.
func withoutNotes(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(l, "note: ") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// Ensure the PASS line counts runs, cases, stores, calls, files, sources,
// and lists what the checks that ran re-derived, checked for consistency
// and left unchecked.
func TestReportText(t *testing.T) {
	f := newFixture(t)
	r, b := auditText(t, f)
	// A fixed text: only the counts that grow with every check written and
	// every source file added are scrubbed, as the goldens scrub them.
	want := "PASS: 7 runs (7 cases × 1 store), 90 calls, N checks; 2 files and N sources verified; partial: experiments: none\n" +
		"re-derived (recomputed from the checkout and the audit's own code, and compared):\n" +
		"  - " + claimDefs["files"].text + "\n" +
		"  - " + claimDefs["sources"].text + "\n" +
		"  - " + claimDefs["protocol"].text + "\n" +
		"  - " + claimDefs["results"].text + "\n" +
		"  - " + claimDefs["report"].text + "\n" +
		"  - " + claimDefs["statement"].text + "\n" +
		"consistency-checked (they hang together as the design requires; counts invented to hang together would too: audit -reproduce re-observes them):\n" +
		"  - " + claimDefs["runfile"].text + "\n" +
		"not checked here:\n" +
		"  - " + claimDefs["server_word"].text + "\n" +
		"  - " + claimDefs["server_ran"].text + "\n" +
		"  - " + claimDefs["commit_none"].text + "\n" +
		"  - " + claimDefs["who"].text + "\n" +
		"  - " + strings.Replace(claimDefs["versions"].text, "%s", "Go's and the OS's (manifest.json go_version, os_arch)", 1) + "\n"
	if got := countScrub.ReplaceAllString(withoutNotes(b.String()), "N $1"); got != want {
		t.Errorf("WriteText() = %q, want %q", got, want)
	}

	f.write(t, "internal/fake/fake.go", "package fake\n")
	f.editJSON(t, "evidence/results.json", func(d map[string]any) { run(d, 1)["counter"] = 9 })
	f.rehash(t)
	f.write(t, "internal/fake/fake.go", "package fake // edited\n")
	r, b = auditText(t, f)
	want = "FAIL: 2 checks\n" +
		"source internal/fake/fake.go: SHA-256 does not match the checkout\n" +
		"case keyed_lost_reply, store volatile: counter: expected 1, observed 9\n"
	if got := withoutNotes(b.String()); got != want {
		t.Errorf("WriteText() = %q, want %q", got, want)
	}

	b.Reset()
	r.WriteJSON(b)
	var j struct {
		Pass     bool
		Checks   int
		Failures []Failure
	}
	if err := json.Unmarshal(b.Bytes(), &j); err != nil {
		t.Fatalf("WriteJSON() wrote invalid JSON: %v", err)
	}
	wantF := Failure{Check: CheckExpectation, Case: "keyed_lost_reply", Store: "volatile", Field: "counter",
		Expected: "1", Observed: "9", Message: "case keyed_lost_reply, store volatile: counter: expected 1, observed 9"}
	if j.Pass || len(j.Failures) != 2 || j.Failures[1] != wantF {
		t.Errorf("WriteJSON() = %s, want pass false and failure %+v", b.String(), wantF)
	}
}

// Ensure unreadable inputs are errors (exit 2), naming the file.
func TestAuditCannotRead(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, f *fixture)
		opts   func(o *Options)
		want   string
	}{
		{
			name: "missing evidence folder",
			opts: func(o *Options) { o.Evidence += "-nope" },
			want: "evidence folder " + "EVIDENCE-nope: no such file or directory",
		},
		{
			name:   "missing manifest",
			mutate: func(t *testing.T, f *fixture) { os.Remove(f.path("evidence/manifest.json")) },
			want:   "EVIDENCE/manifest.json: no such file or directory",
		},
		{
			name:   "manifest not JSON",
			mutate: func(t *testing.T, f *fixture) { f.write(t, "evidence/manifest.json", "{") },
			want:   "EVIDENCE/manifest.json: not valid JSON: unexpected EOF",
		},
		{
			name:   "manifest not an object",
			mutate: func(t *testing.T, f *fixture) { f.write(t, "evidence/manifest.json", "[]") },
			want:   "EVIDENCE/manifest.json: not a JSON object",
		},
		{
			name: "case file against its schema",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "cases/90-bad.json", `{"name": "bad", "summary": "s", "steps": [{"call": {"fault": ""}}], "expect": {"volatile": {"counter": "1", "exit_codes": [], "calls": []}}}`)
			},
			want: "cases/90-bad.json: /expect/volatile/counter: expected integer, but got string\n" +
				"cases/90-bad.json: /steps/0/call/fault: length must be >= 1, but got 0",
		},
		{
			name:   "case file not JSON",
			mutate: func(t *testing.T, f *fixture) { f.write(t, "cases/90-bad.json", "{") },
			want:   "cases/90-bad.json: (root): not valid JSON: unexpected EOF",
		},
		{
			name: "case name differs from the file name",
			mutate: func(t *testing.T, f *fixture) {
				data, _ := os.ReadFile(f.path("cases/20-keyed_lost_reply.json"))
				f.write(t, "cases/90-other.json", string(data))
			},
			want: `cases/90-other.json: /name: "keyed_lost_reply" does not match the file name (want "other")`,
		},
		{
			name: "case file name without its number",
			mutate: func(t *testing.T, f *fixture) {
				data, _ := os.ReadFile(f.path("cases/20-keyed_lost_reply.json"))
				os.Remove(f.path("cases/20-keyed_lost_reply.json"))
				f.write(t, "cases/keyed_lost_reply.json", string(data))
			},
			want: "cases/keyed_lost_reply.json: (file name): must be NN-keyed_lost_reply.json (two digits, a dash, the case name)",
		},
		{
			name: "two case files with one name",
			mutate: func(t *testing.T, f *fixture) {
				data, _ := os.ReadFile(f.path("cases/20-keyed_lost_reply.json"))
				f.write(t, "cases/21-keyed_lost_reply.json", string(data))
			},
			want: `cases/21-keyed_lost_reply.json: /name: "keyed_lost_reply" is already the name of cases/20-keyed_lost_reply.json`,
		},
		{
			name: "unknown -case",
			opts: func(o *Options) { o.Case = "nosuch" },
			want: "-case nosuch: no file in cases/ has this name",
		},
		{
			name: "unknown -store",
			opts: func(o *Options) { o.Store = "sharded" },
			want: "-store sharded: unknown store (known: volatile, durable, postgres)",
		},
		{
			name:   "missing schema",
			mutate: func(t *testing.T, f *fixture) { os.Remove(f.path("schema/run.schema.json")) },
			want:   "schema/run.schema.json: no such file or directory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if tt.mutate != nil {
				tt.mutate(t, f)
			}
			opts := Options{Root: f.root, Evidence: f.evidence}
			if tt.opts != nil {
				tt.opts(&opts)
			}
			_, err := Audit(opts)
			if err == nil {
				t.Fatalf("Audit() error = nil, want %q", tt.want)
			}
			if got, want := strings.ReplaceAll(err.Error(), f.evidence, "EVIDENCE"), tt.want; got != want {
				t.Errorf("Audit() error =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// countScrub matches the check and source counts of a verdict line.
var countScrub = regexp.MustCompile(`\d+ (checks|sources)`)

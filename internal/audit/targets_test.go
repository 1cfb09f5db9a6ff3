package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"idemlab/internal/audit/digest"
	"idemlab/internal/audit/strict"
)

// newTargetFixture is a mini checkout holding the repo's real schema/ and,
// pinned in testdata/targets (see its README.md), the case files and the
// three target folders of a real plain run, with a targets-only evidence
// folder (what runner -target writes) holding that run's targets.json, a
// manifest with computed hashes, and what the audit derives of them.
func newTargetFixture(t *testing.T) *fixture {
	t.Helper()
	return fromTemplate(t, "targets", buildTargetFixture)
}

// buildTargetFixture builds the target fixture.
func buildTargetFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{root: root, evidence: filepath.Join(root, "evidence")}
	for to, from := range map[string]string{
		"schema":            filepath.Join("..", "..", "schema"),
		"cases":             filepath.Join("testdata", "targets", "cases"),
		"targets":           filepath.Join("testdata", "targets", "targets"),
		"evidence":          filepath.Join("testdata", "targets", "evidence"),
		"internal/protocol": filepath.Join("testdata", "protocol"),
	} {
		err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(from, p)
			f.write(t, to+"/"+filepath.ToSlash(rel), string(data))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	f.write(t, "go.mod", "module fake\n\ngo 1.26\n")
	f.write(t, "go.sum", "")

	doc := f.readJSON(t, "evidence/targets.json")
	var names, cases []string
	var entries []any
	for _, x := range doc["targets"].([]any) {
		tm := x.(map[string]any)
		names = append(names, tm["name"].(string))
		entries = append(entries, map[string]any{"name": tm["name"], "dir": tm["dir"], "digest": tm["digest"],
			"libraries": tm["libraries"], "runtime": tm["runtime"], "skipped": tm["skipped"]})
	}
	for _, r := range doc["targets"].([]any)[0].(map[string]any)["runs"].([]any) {
		cases = append(cases, r.(map[string]any)["case"].(string))
	}
	f.writeJSON(t, "evidence/manifest.json", map[string]any{
		"schema_version": 1,
		"generated_utc":  "2026-12-01T10:03:00Z",
		"source_commit":  strings.Repeat("ab", 20),
		"source_dirty":   false,
		"go_version":     "go1.26.8",
		"os_arch":        "linux/amd64",
		"server_sha256":  strings.Repeat("0", 64),
		"protocol":       protocolDoc(),
		"selection":      map[string]any{"cases": cases, "stores": []string{}, "targets": names, "experiments": []string{}},
		"flags":          map[string]string{},
		"targets":        entries,
		"sources":        map[string]string{},
		"files":          map[string]string{},
	})
	f.rehashTargets(t)
	return f
}

// rehashTargets recomputes the manifest's files and sources of a target
// fixture (every source folder walked, written independently of the code
// under test), then has the audit derive its files again.
func (f *fixture) rehashTargets(t *testing.T) {
	t.Helper()
	files := map[string]string{}
	sources := map[string]string{}
	sum := func(data []byte) string {
		s := sha256.Sum256(data)
		return hex.EncodeToString(s[:])
	}
	err := filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(f.root, p)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch top, _, _ := strings.Cut(rel, "/"); {
		case top == "evidence":
			if n := strings.TrimPrefix(rel, "evidence/"); n != "manifest.json" && !derivedName(n) {
				files[n] = sum(data)
			}
		case strings.HasSuffix(rel, "_test.go") || strings.Contains(rel, "/testdata/"):
		case rel == "go.mod" || rel == "go.sum" || slices.Contains([]string{"cmd", "internal", "cases", "schema", "targets"}, top):
			sources[rel] = sum(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
		m["files"] = files
		m["sources"] = sources
	})
	f.derive(t)
}

// targetOf returns target name of targets.json, for edits.
func targetOf(doc map[string]any, name string) map[string]any {
	for _, x := range doc["targets"].([]any) {
		if tm := x.(map[string]any); tm["name"] == name {
			return tm
		}
	}
	panic("no target " + name)
}

// shareRun rewrites run r as a run on a shared process writes it: no
// process or exit code of its own, every key sent with prefix (none: "").
func shareRun(r map[string]any, prefix string) {
	det := r["detail"].(map[string]any)
	det["shared_process"] = map[string]any{"pid": json.Number("4242"), "ready_ms": json.Number("812.5"), "runs": json.Number("9"), "exit_code": json.Number("143")}
	r["exit_codes"], det["processes"] = []any{}, []any{}
	if prefix == "" {
		return
	}
	det["key_prefix"] = prefix
	for _, c := range r["calls"].([]any) {
		cm := c.(map[string]any)
		if k, ok := cm["key"].(string); ok {
			cm["key"] = prefix + k
		}
	}
}

// targetRun returns the run of case cname on target tname, for edits.
func targetRun(doc map[string]any, tname, cname string) map[string]any {
	for _, r := range targetOf(doc, tname)["runs"].([]any) {
		if rm := r.(map[string]any); rm["case"] == cname {
			return rm
		}
	}
	panic("no run " + cname + " on " + tname)
}

// forge edits targets.json, then, as a careful forger would, rehashes
// and has the audit derive its files again (TARGETS.md, verdicts.json, the
// statement), so that each test breaks one rule.
func (f *fixture) forge(t *testing.T, edit func(doc map[string]any)) {
	t.Helper()
	f.editJSON(t, "evidence/targets.json", edit)
	f.rehashTargets(t)
}

// editText rewrites an evidence file, replacing old with new once (hashes
// untouched); the test fails if old is not there.
func (f *fixture) editText(t *testing.T, rel, old, new string) {
	t.Helper()
	data := string(mustRead(t, f.path(rel)))
	if !strings.Contains(data, old) {
		t.Fatalf("%s holds no %q", rel, old)
	}
	f.write(t, rel, strings.Replace(data, old, new, 1))
}

// Ensure the real runs on targets pass, and that every rule of the target
// evidence, broken on its own (the audit's files derived again where the
// forgery is in an observation), fails with a line naming what was forged.
func TestAuditTargets(t *testing.T) {
	t.Parallel()
	const (
		express = "express-idempotency"
		redis   = "node-idempotency-redis"
	)
	tests := []auditCase{
		{name: "pass", mutate: func(t *testing.T, f *fixture) {}},
		{
			name: "a verdict recorded in targets.json",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					targetRun(d, redis, "restart_after_reply")["verdict"] = map[string]any{"safety": "pass", "effects": 1, "sound_effects": 1, "findings": []any{}, "deviations": []any{}}
				})
			},
			want: []string{`targets.json: /targets/2/runs/4: additionalProperties 'verdict' not allowed`},
			note: "targets.json is missing or invalid: the runs on targets were not checked",
		},
		{
			name: "a run on a shared process, as the runner writes one",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) { shareRun(targetRun(d, express, "keyed_lost_reply"), "abcdefgh-") })
			},
		},
		{
			name: "a case that restarts its process claimed on a shared one",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) { shareRun(targetRun(d, express, "restart_after_reply"), "abcdefgh-") })
			},
			want: []string{
				`targets.json: target express-idempotency, case restart_after_reply: detail.shared_process: expected none: the case needs a process of its own (its steps restart, stop or crash a process), observed pid 4242`,
			},
		},
		{
			name: "two shared runs of a target with one key prefix",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					shareRun(targetRun(d, express, "keyed_lost_reply"), "abcdefgh-")
					shareRun(targetRun(d, express, "body_conflict"), "abcdefgh-")
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case body_conflict: detail.key_prefix: expected a prefix no other run of the target drew, observed "abcdefgh-", keyed_lost_reply's too`,
			},
		},
		{
			name: "a shared run without a key prefix, its process's exit kept",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					r := targetRun(d, express, "keyed_lost_reply")
					codes, procs := r["exit_codes"], r["detail"].(map[string]any)["processes"]
					shareRun(r, "")
					r["exit_codes"], r["detail"].(map[string]any)["processes"] = codes, procs
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case keyed_lost_reply: detail.key_prefix: expected a prefix unique to the run (its process is shared: other runs' keys must not answer), observed none`,
				`targets.json: target express-idempotency, case keyed_lost_reply: exit_codes: expected 0 codes (none: the run shared a process (detail.shared_process)), observed 1`,
			},
		},
		{
			name: "a not_run added to hide a violating run",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					r := targetRun(d, redis, "crash_after_effect")
					r["not_run"] = "the case runs 1 replicas; the target claims no shared store"
					for k, v := range map[string]any{"counter": nil, "exit_codes": []any{}, "calls": []any{}, "detail": nil} {
						r[k] = v
					}
				})
			},
			want: []string{
				`targets.json: target node-idempotency-redis, case crash_after_effect: not_run: expected "" (the case runs on this target, by the audit's own reading of cases/60-crash_after_effect.json and target.json), observed "the case runs 1 replicas; the target claims no shared store"`,
			},
		},
		{
			name: "a counter that disagrees with the journal",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) { targetRun(d, express, "crash_after_effect")["counter"] = json.Number("1") })
			},
			want: []string{
				`targets.json: target express-idempotency, case crash_after_effect: counter: expected 2 (the effects in the sink's journal), observed 1`,
			},
		},
		{
			// A target that wraps the payment before it calls the sink
			// breaks the sink's contract, not the evidence: the audit
			// passes and says so (TestFaultNotFired runs such a target).
			name: "a journal entry whose body no call sent",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					j := targetRun(d, express, "keyed_lost_reply")["detail"].(map[string]any)["journal"].([]any)
					sum := sha256.Sum256([]byte("add-two"))
					j[0].(map[string]any)["body_sha256"] = hex.EncodeToString(sum[:])
				})
			},
			note: "target express-idempotency sent the effect sink a body none of its clients sent (the sink's contract asks for the intent's request body): " +
				"its effects are counted all the same, but a fault armed at the sink for the client's body cannot fire there, and a case that places one is not judged",
		},
		{
			name: "a key not sent as the target's key format writes it",
			mutate: func(t *testing.T, f *fixture) {
				// The target asks for UUID keys; every call records its
				// key's UUID but one, which records the case's word.
				uuid := func(s string) string {
					return strings.Replace(s, `"key_header": "Idempotency-Key"`, `"key_header": "Idempotency-Key", "key_format": "uuid"`, 1)
				}
				tj := "targets/express-idempotency/target.json"
				f.write(t, tj, uuid(string(mustRead(t, f.path(tj)))))
				sum, err := digest.Folder(f.root, "targets/express-idempotency")
				if err != nil {
					t.Fatal(err)
				}
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["targets"].([]any)[0].(map[string]any)["digest"] = sum })
				f.forge(t, func(d map[string]any) {
					tm := targetOf(d, express)
					tm["target_json"], tm["digest"] = uuid(tm["target_json"].(string)), sum
					for _, r := range tm["runs"].([]any) {
						rm := r.(map[string]any)
						for i, c := range rm["calls"].([]any) {
							cm := c.(map[string]any)
							if k, ok := cm["key"].(string); ok && (rm["case"] != "keyed_lost_reply" || i != 1) {
								cm["key"] = *sentKey(&k, "uuid")
							}
						}
					}
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case keyed_lost_reply, call 1: key: expected "262b8893-bf06-5b5b-ba4d-8a208a32ae10" (as the case's steps send), observed "same"`,
			},
		},
		{
			name: "a replay of a forwarded key is no effect",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					det := targetRun(d, express, "crash_after_effect")["detail"].(map[string]any)
					first := det["journal"].([]any)[0].(map[string]any)
					first["key"] = "same"
					det["journal"] = append(det["journal"].([]any), map[string]any{"seq": json.Number("1"), "replica": first["replica"],
						"body_sha256": first["body_sha256"], "key": "same", "replayed": true, "at": first["at"]})
				})
			},
		},
		{
			name: "a replay the sink's journal does not back",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					det := targetRun(d, express, "crash_after_effect")["detail"].(map[string]any)
					first := det["journal"].([]any)[0].(map[string]any)
					first["key"] = "other" // effect 1, applied under key "other"
					replay := func(seq string) map[string]any {
						return map[string]any{"seq": json.Number(seq), "replica": first["replica"], "body_sha256": first["body_sha256"], "key": "same", "replayed": true, "at": first["at"]}
					}
					det["journal"] = append(det["journal"].([]any), replay("1"), replay("3"))
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case crash_after_effect: detail.journal[2]: expected a replay under effect 1's forwarded key "other" and body, observed key "same", body_sha256 "` + sha256Hex([]byte("add-one")) + `"`,
				`targets.json: target express-idempotency, case crash_after_effect: detail.journal[3].seq: expected an effect applied before this replay (1..2), observed 3`,
			},
		},
		{
			name: "an edited digest",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/targets.json", func(d map[string]any) { targetOf(d, express)["digest"] = strings.Repeat("1", 64) })
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["targets"].([]any)[0].(map[string]any)["digest"] = strings.Repeat("1", 64)
				})
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: digest: expected ` + expressDigest + ` (the audit's own digest of targets/express-idempotency in the checkout), observed 1111111111111111111111111111111111111111111111111111111111111111`,
			},
		},
		{
			name: "an edited library version",
			mutate: func(t *testing.T, f *fixture) {
				edit := func(tm map[string]any) { tm["libraries"].([]any)[0].(map[string]any)["version"] = "1.0.7" }
				f.editJSON(t, "evidence/targets.json", func(d map[string]any) { edit(targetOf(d, express)) })
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { edit(m["targets"].([]any)[0].(map[string]any)) })
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: libraries: expected [{"name":"express-idempotency","version":"1.0.6"},{"name":"express","version":"4.22.3"}] (as targets/express-idempotency/package-lock.json pins them), observed [{"name":"express-idempotency","version":"1.0.7"},{"name":"express","version":"4.22.3"}]`,
			},
		},
		{
			name: "target_json claims a durable store",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					tm := targetOf(d, express)
					tm["target_json"] = strings.Replace(tm["target_json"].(string), `"durable": false`, `"durable": true`, 1)
				})
			},
			want: []string{
				`targets.json: target express-idempotency: target_json: differs from targets/express-idempotency/target.json in the checkout: line 15: expected "  \"claims\": {\"durable\": false, \"shared_store\": false, \"capacity\": null, \"max_body\": 102400},", observed "  \"claims\": {\"durable\": true, \"shared_store\": false, \"capacity\": null, \"max_body\": 102400},"`,
			},
		},
		{
			name: "TARGETS.md edited",
			mutate: func(t *testing.T, f *fixture) {
				f.forgeRow(t)
			},
			want: []string{forgedRowFailure},
		},
		{
			name: "a finding removed from verdicts.json",
			mutate: func(t *testing.T, f *fixture) {
				v := f.readVerdicts(t)
				r := &v.Targets[2].Runs[5]
				if r.Case != "crash_before_effect" || len(r.Findings) != 2 {
					t.Fatalf("verdicts.json: %s on %s: %d findings, want crash_before_effect's 2", r.Case, v.Targets[2].Target, len(r.Findings))
				}
				r.Findings = r.Findings[:1]
				data, err := marshalEvidence(v)
				if err != nil {
					t.Fatal(err)
				}
				f.write(t, "evidence/"+VerdictsFile, string(data))
			},
			want: []string{
				`verdicts.json: differs from the audit's own rendering: line 991: expected "            },", observed "            }"`,
			},
		},
		{
			name:   "TARGETS.md missing",
			mutate: func(t *testing.T, f *fixture) { os.Remove(f.path("evidence/TARGETS.md")) },
			want:   []string{"TARGETS.md: missing: the audit derives it from the observations (audit -write writes it)"},
		},
		{
			name: "a manifest.targets entry edited",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["targets"].([]any)[2].(map[string]any)["runtime"] = "v22.0.0"
				})
				f.rehashTargets(t)
			},
			want: []string{
				`manifest.json: targets[2] (node-idempotency-redis): runtime: expected "v20.20.2" (targets.json), observed "v22.0.0"`,
			},
		},
		{
			name: "a success's body not a value the sink gave",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					targetRun(d, express, "keyed_lost_reply")["calls"].([]any)[1].(map[string]any)["body"] = "7"
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case keyed_lost_reply, call 1: body: expected the value of an effect in the sink's journal (1..1): the target answers a success with the sink's value, observed "7"`,
			},
		},
		{
			name: "a replay flag on a target that names no marker",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					targetRun(d, express, "keyed_lost_reply")["calls"].([]any)[1].(map[string]any)["replayed"] = true
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case keyed_lost_reply, call 1: replayed: expected null (the target names no replay marker: the lab reads none), observed true`,
			},
		},
		{
			name: "a run dropped",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					tm := targetOf(d, redis)
					runs := tm["runs"].([]any)
					tm["runs"] = slices.Delete(slices.Clone(runs), 5, 6)
				})
			},
			want: []string{
				`targets.json: target node-idempotency-redis: runs: expected one per case of manifest.json selection.cases, in its order (15), observed 14: runs[5] is crash_after_effect, want crash_before_effect`,
			},
		},
	}
	runAuditCases(t, tests, newTargetFixture)
}

// forgeRow edits TARGETS.md to say node-idempotency-redis passed
// restart_after_reply (it left its key stuck: a violation), and
// forgedRowFailure is the audit's line on it.
func (f *fixture) forgeRow(t *testing.T) {
	t.Helper()
	f.editText(t, "evidence/TARGETS.md", "| restart_after_reply | 1 (1) | violation |", "| restart_after_reply | 1 (1) | pass |")
}

const forgedRowFailure = `TARGETS.md: differs from the audit's own rendering: line 273: expected "| restart_after_reply | 1 (1) | violation | — | stuck_key: the last call with key \"same\" got 409: the key was left ...", observed "| restart_after_reply | 1 (1) | pass | — | stuck_key: the last call with key \"same\" got 409: the key was left in pr..."`

// expressDigest is the folder digest of the fixture's
// targets/express-idempotency (testdata/targets/targets).
const expressDigest = "25b48a4099d254ae11d46a176b6fb01dedb0e52f733db405d38902eacba185ae"

// Ensure the audit derives, from a real run's observations alone, the
// TARGETS.md and verdicts the lab itself wrote of it (testdata/targets;
// -update-spec rewrites them).
func TestTargetsGolden(t *testing.T) {
	f := newTargetFixture(t)
	for _, name := range []string{TargetsReportFile, VerdictsFile} {
		got := mustRead(t, f.path("evidence/"+name))
		if *updateSpec { // the renderings rewritten by the audit's renderers: review the diff
			if err := os.WriteFile(filepath.Join("testdata", "targets", name), got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if want := mustRead(t, filepath.Join("testdata", "targets", name)); !bytes.Equal(got, want) {
			t.Errorf("derived %s differs from testdata/targets/%s at %s", name, name, lineDiff(got, want))
		}
	}
	validVerdicts(t, f)
}

// lineDiff says where got first differs from want, by line.
func lineDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		if i >= len(g) || i >= len(w) || g[i] != w[i] {
			return fmt.Sprintf("line %d: %q, want %q", i+1, strings.Join(g[i:min(i+1, len(g))], ""), strings.Join(w[i:min(i+1, len(w))], ""))
		}
	}
	return "the same lines"
}

// validVerdicts checks the fixture's verdicts.json against
// schema/verdicts.schema.json.
func validVerdicts(t *testing.T, f *fixture) {
	t.Helper()
	schemas, err := strict.LoadSchemas(filepath.Join(f.root, "schema"))
	if err != nil {
		t.Fatal(err)
	}
	schema := schemas.Schema("verdicts.schema.json")
	v, err := decodeJSON(mustRead(t, f.path("evidence/"+VerdictsFile)), jsonCap{Values: 1 << 20, Objects: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if lines := validate(schema, v); len(lines) > 0 {
		t.Errorf("verdicts.json against its schema:\n%s\nwant no failure", strings.Join(lines, "\n"))
	}
}

// Ensure a target's verdicts follow its observations: a forged observation
// that hangs together passes, TARGETS.md and verdicts.json derived again
// saying what it shows (observations are not checked here), and fails
// beside the honest renderings kept.
func TestAuditTargetObservations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		target, cname string
		forge         func(r map[string]any)
		row           string   // the case's row in TARGETS.md, derived from the forgery
		safety        string   // its verdict in verdicts.json
		kept          []string // the failures with the honest TARGETS.md and verdicts.json kept
	}{
		{
			name:   "a stuck key's 409 made a replay",
			target: "node-idempotency-redis", cname: "restart_after_reply",
			forge: func(r map[string]any) {
				c := r["calls"].([]any)[1].(map[string]any)
				c["status"], c["body"], c["replayed"] = json.Number("200"), "1", true
				delete(c, "retry_after")
			},
			row:    "| restart_after_reply | 1 (1) | pass | — | — |",
			safety: "pass",
			kept: []string{
				`TARGETS.md: differs from the audit's own rendering: line 273: expected "| restart_after_reply | 1 (1) | pass | — | — |", observed "| restart_after_reply | 1 (1) | violation | — | stuck_key: the last call with key \"same\" got 409: the key was left ..."`,
				`verdicts.json: differs from the audit's own rendering: line 945: expected "          \"safety\": \"pass\",", observed "          \"safety\": \"violation\","`,
			},
		},
		{
			name:   "a duplicate effect left out of the journal",
			target: "express-idempotency", cname: "crash_after_effect",
			forge: func(r map[string]any) {
				r["counter"] = json.Number("1")
				r["calls"].([]any)[1].(map[string]any)["body"] = "1"
				det := r["detail"].(map[string]any)
				det["journal"] = det["journal"].([]any)[:1]
			},
			row:    "| crash_after_effect | 1 (1) | pass | — | — |",
			safety: "pass",
			kept: []string{
				`TARGETS.md: differs from the audit's own rendering: line 36: expected "| crash_after_effect | 1 (1) | pass | — | — |", observed "| crash_after_effect | 2 (1) | limitation | — | duplicate_effect: 2 effects applied; a sound implementation applies..."`,
				`verdicts.json: differs from the audit's own rendering: line 214: expected "          \"safety\": \"pass\",", observed "          \"safety\": \"limitation\","`,
			},
		},
	}
	for _, tt := range tests {
		forge := func(t *testing.T, f *fixture) {
			f.forge(t, func(d map[string]any) { tt.forge(targetRun(d, tt.target, tt.cname)) })
		}
		t.Run(tt.name+"/derived again", func(t *testing.T) {
			f := newTargetFixture(t)
			forge(t, f)
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, r, messages(r), nil, "")
			if got := string(mustRead(t, f.path("evidence/TARGETS.md"))); !strings.Contains(got, "\n"+tt.row+"\n") {
				t.Errorf("TARGETS.md has no row %q", tt.row)
			}
			if got := safetyOf(t, f, tt.target, tt.cname); got != tt.safety {
				t.Errorf("verdicts.json: %s on %s: safety %q, want %q", tt.cname, tt.target, got, tt.safety)
			}
		})
		t.Run(tt.name+"/renderings kept", func(t *testing.T) {
			f := newTargetFixture(t)
			f.keeping(t, []string{TargetsReportFile, VerdictsFile}, func() { forge(t, f) })
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, r, messages(r), tt.kept, "")
		})
	}
}

// safetyOf is the safety verdict of case cname on target tname in the
// fixture's verdicts.json.
func safetyOf(t *testing.T, f *fixture, tname, cname string) string {
	t.Helper()
	for _, tv := range f.readVerdicts(t).Targets {
		for _, r := range tv.Runs {
			if tv.Target == tname && r.Case == cname {
				return r.Safety
			}
		}
	}
	t.Fatalf("verdicts.json has no run of %s on %s", cname, tname)
	return ""
}

// Ensure the PASS line of a targets-only folder counts the runs on targets
// and says no store ran, and a note says what is not re-derived: a
// target's observations.
func TestTargetsPassLine(t *testing.T) {
	r, b := auditText(t, newTargetFixture(t))
	pass, _, _ := strings.Cut(b.String(), "\n")
	want := regexp.MustCompile(`^PASS: 29 target runs on 3 targets \(express-idempotency, node-idempotency-memory, node-idempotency-redis; 16 not run\), 100 calls, [0-9]+ checks; 1 file and [0-9]+ sources verified; partial: stores: none \(runs on targets only\); experiments: none$`)
	if !want.MatchString(pass) {
		t.Errorf("PASS line %q, want it to match %s", pass, want)
	}
	if !strings.Contains(b.String(), "note: targets.json: a target's observations are not byte-identical from run to run") {
		t.Errorf("no note on the observations of targets:\n%s", b.String())
	}
	if r.TargetRuns != 29 || r.TargetsNotRun != 16 || len(r.Targets) != 3 || r.TargetCalls != 100 {
		t.Errorf("report counts: %d runs, %d not run, %d targets, %d calls; want 29, 16, 3, 100", r.TargetRuns, r.TargetsNotRun, len(r.Targets), r.TargetCalls)
	}
}

// Ensure the folder and selection rules of targets: a folder outside the
// checkout is not re-read (a note says so), a skipped target has no runs
// (a note), node_modules and the setup marker are no part of a digest, a
// symlink in a folder is refused, and the selection decides which target
// files must be there.
func TestAuditTargetFolders(t *testing.T) {
	t.Parallel()
	const express = "express-idempotency"
	manifestTarget := func(m map[string]any, i int) map[string]any { return m["targets"].([]any)[i].(map[string]any) }
	tests := []auditCase{
		{
			// A shipped target is never taken from outside the checkout
			// (targetselection_test.go has one that is).
			name: "a shipped target said to be from outside the checkout",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/targets.json", func(d map[string]any) {
					tm := targetOf(d, express)
					tm["dir"] = ""
					tm["target_json"] = strings.Replace(tm["target_json"].(string), "README shows", "README says", 1)
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { manifestTarget(m, 0)["dir"] = "" })
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: dir: "" (a folder outside the checkout), but the checkout ships targets/express-idempotency/target.json: a shipped target is re-read from its folder, never taken on the runner's word`,
			},
		},
		{
			name: "pass/a skipped target",
			mutate: func(t *testing.T, f *fixture) {
				const why = "redis-server not found (Debian's redis-server package)"
				f.editJSON(t, "evidence/targets.json", func(d map[string]any) {
					tm := targetOf(d, "node-idempotency-redis")
					tm["skipped"], tm["runs"], tm["libraries"], tm["runtime"] = why, []any{}, []any{}, ""
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					mt := manifestTarget(m, 2)
					mt["skipped"], mt["libraries"], mt["runtime"] = why, []any{}, ""
				})
				f.rehashTargets(t)
			},
			note: "target node-idempotency-redis was skipped here (redis-server not found (Debian's redis-server package)): none of its cases ran, and nothing about it can be proved from this folder",
		},
		{
			name: "a skipped target with runs",
			mutate: func(t *testing.T, f *fixture) {
				const why = "node not found (Debian's nodejs package)"
				f.editJSON(t, "evidence/targets.json", func(d map[string]any) {
					tm := targetOf(d, express)
					tm["skipped"], tm["libraries"], tm["runtime"] = why, []any{}, ""
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					mt := manifestTarget(m, 0)
					mt["skipped"], mt["libraries"], mt["runtime"] = why, []any{}, ""
				})
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: runs: 15, but the target was skipped (node not found (Debian's nodejs package)): a skipped target runs no case`,
			},
		},
		{
			name: "pass/node_modules and the setup marker are no part of the digest",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "targets/express-idempotency/node_modules/express/index.js", "module.exports = 1\n")
				f.write(t, "targets/express-idempotency/.idemlab-setup", expressDigest+"\n")
				f.write(t, "targets/express-idempotency/.idemlab-setup.lock", "")
			},
		},
		{
			name: "a file added to a target folder",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "targets/express-idempotency/lib/patch.js", "// changes the app\n")
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: digest: expected 669ae60a4483c9769da2bd67c6eb4cf1ac1732bb4b20a59d412dff0d5ad5ae8d (the audit's own digest of targets/express-idempotency in the checkout), observed ` + expressDigest,
			},
		},
		{
			name: "a symlink in a target folder",
			mutate: func(t *testing.T, f *fixture) {
				if err := os.Symlink("app.js", f.path("targets/express-idempotency/link.js")); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{
				`source targets/express-idempotency/link.js: not a regular file (a symlink or special file; refused, never followed)`,
				`targets.json: target express-idempotency: digest: cannot re-derive it from targets/express-idempotency in the checkout: link.js: a symbolic link (refused: the audit reads only regular files inside its folders)`,
			},
		},
		{
			name: "a dir that leaves the checkout",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/targets.json", func(d map[string]any) { targetOf(d, express)["dir"] = "../express-idempotency" })
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { manifestTarget(m, 0)["dir"] = "../express-idempotency" })
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: dir: "../express-idempotency" is not a clean slash path inside the checkout ending in the target's name`,
			},
		},
		{
			name: "targets.json missing from a targets-only folder",
			mutate: func(t *testing.T, f *fixture) {
				os.Remove(f.path("evidence/targets.json"))
				f.rehashTargets(t)
			},
			note: "targets.json is missing or invalid: the runs on targets were not checked",
			want: []string{
				`manifest.json: /files: minimum 1 properties allowed, but found 0 properties`, // targets.json was its one file
				`file targets.json: required by manifest.selection but missing`,
			},
		},
		{
			name: "targets.json listed, but no target selected",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["selection"].(map[string]any)["targets"] = []any{}
					m["targets"] = []any{}
				})
				f.rehashTargets(t)
			},
			want: []string{
				`manifest.json: selection: cases, but no store and no target to run them on`,
				`manifest.json: selection.targets: empty, but manifest.files lists targets.json`,
			},
		},
		{
			name: "targets selected without cases",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["selection"].(map[string]any)["cases"] = []any{} })
				f.rehashTargets(t)
			},
			want: []string{
				`manifest.json: selection: targets without cases (a target runs the selected cases)`,
				`manifest.json: selection: selects no case and no experiment: the evidence claims nothing`,
				`targets.json: target express-idempotency: runs: expected one per case of manifest.json selection.cases, in its order (0), observed 15: runs[0] is unkeyed_lost_reply, want (none)`,
				`targets.json: target node-idempotency-memory: runs: expected one per case of manifest.json selection.cases, in its order (0), observed 15: runs[0] is unkeyed_lost_reply, want (none)`,
				`targets.json: target node-idempotency-redis: runs: expected one per case of manifest.json selection.cases, in its order (0), observed 15: runs[0] is unkeyed_lost_reply, want (none)`,
			},
		},
	}
	runAuditCases(t, tests, newTargetFixture)
}

// mirrorTarget is the lab's own server as a target that mirrors the
// volatile store, counting its effects itself and taking every fault as
// its own header.
const mirrorTarget = `{
  "name": "effectserver",
  "summary": "the lab's own server through the generic adapter, on the volatile store",
  "start": {"argv": ["{effectserver}", "-addr", "127.0.0.1:{port}"], "ready": {"tcp": true}},
  "request": {"path": "/effect", "key_header": "Idempotency-Key"},
  "replay": {"header": "Idempotency-Replayed", "value": "true"},
  "effects": {"count": ["{effectserver}", "-count", "{state}"]},
  "faults": {"native": {"*": {"header": "X-Lab-Fault", "value": "{fault}"}}},
  "claims": {"durable": false, "shared_store": false, "capacity": 64, "max_body": 4096},
  "mirrors": "volatile"
}
`

// newMirrorFixture is the store fixture (seven cases on volatile, each
// given a target section) with the lab's own server as a target beside it,
// mirroring the volatile store: each target run observes exactly the native
// run, and the audit derives its verdicts.
func newMirrorFixture(t *testing.T) *fixture {
	t.Helper()
	return fromTemplate(t, "mirror", buildMirrorFixture)
}

// buildMirrorFixture builds the mirror fixture.
func buildMirrorFixture(t *testing.T) *fixture {
	t.Helper()
	f := buildFixture(t) // not newFixture: fromTemplate holds its lock
	entries, _ := os.ReadDir(f.path("cases"))
	for _, e := range entries {
		f.editJSON(t, "cases/"+e.Name(), func(d map[string]any) {
			d["target"] = map[string]any{"sound": "volatile", "tests": []any{"duplicate_effect"}}
		})
	}
	f.write(t, "targets/effectserver/target.json", mirrorTarget)
	sum := sha256.Sum256([]byte(mirrorTarget))
	line := "target.json\x00" + hex.EncodeToString(sum[:]) + "\n"
	digest := sha256.Sum256([]byte(line))
	tm := map[string]any{"name": "effectserver", "dir": "targets/effectserver", "digest": hex.EncodeToString(digest[:]),
		"libraries": []any{}, "runtime": "", "skipped": ""}
	runs := []any{}
	for _, r := range f.readJSON(t, "evidence/results.json")["runs"].([]any) {
		rm := r.(map[string]any)
		var procs, calls []any
		for _, code := range rm["exit_codes"].([]any) {
			procs = append(procs, map[string]any{"pid": 7, "addr": "127.0.0.1:4000", "ready_ms": 1, "exit_code": code})
		}
		for range rm["calls"].([]any) {
			calls = append(calls, map[string]any{"latency_ms": 1, "error": "", "client": 0})
		}
		runs = append(runs, map[string]any{"case": rm["case"], "not_run": "", "counter": rm["counter"], "exit_codes": rm["exit_codes"],
			"calls": rm["calls"], "detail": map[string]any{"wall_ms": 1, "processes": procs, "calls": calls, "log": []any{}, "journal": []any{}, "exchanges": []any{}}})
	}
	f.writeJSON(t, "evidence/targets.json", map[string]any{"schema_version": 1, "targets": []any{map[string]any{
		"name": "effectserver", "dir": "targets/effectserver", "target_json": mirrorTarget, "digest": tm["digest"],
		"libraries": []any{}, "runtime": "", "skipped": "", "runs": runs}}})
	f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
		m["selection"].(map[string]any)["targets"] = []any{"effectserver"}
		m["targets"] = []any{tm}
	})
	f.rehashTargets(t)
	return f
}

// Ensure a target that mirrors a store passes where it observed what the
// native runs did, that the audit itself finds where it did not (its
// TARGETS.md and verdicts.json say so), that a difference hidden or made
// up in them is caught, and that a plain run's two halves, stores and
// targets, are audited together.
func TestAuditMirror(t *testing.T) {
	t.Parallel()
	const diff = `call 1: 200 "1" replayed=true natively, 200 "2" replayed=true as a target`
	// observed forges the target's second call of keyed_lost_reply, so that
	// it differs from the native run.
	observed := func(t *testing.T, f *fixture) {
		f.forge(t, func(d map[string]any) {
			targetRun(d, "effectserver", "keyed_lost_reply")["calls"].([]any)[1].(map[string]any)["body"] = "2"
		})
	}
	tests := []struct {
		name   string
		mutate func(t *testing.T, f *fixture)
		want   []string // exact failure lines; nil: pass
		mirror string   // with a pass: TARGETS.md's line on the mirror
		diffs  []string // with a pass: keyed_lost_reply's differences in verdicts.json
	}{
		{name: "pass", mutate: func(t *testing.T, f *fixture) {}, mirror: "all 7 runs identical", diffs: []string{}},
		{name: "pass/a difference observed", mutate: observed, mirror: "1 of 7 runs DIFFER", diffs: []string{diff}},
		{
			name: "a difference hidden",
			mutate: func(t *testing.T, f *fixture) {
				f.keeping(t, []string{TargetsReportFile, VerdictsFile}, func() { observed(t, f) })
			},
			want: []string{
				`TARGETS.md: differs from the audit's own rendering: line 27: expected "- mirrors the native volatile store: 1 of 7 runs DIFFER", observed "- mirrors the native volatile store: all 7 runs identical"`,
				`verdicts.json: differs from the audit's own rendering: line 79: expected "          \"safety\": \"violation\",", observed "          \"safety\": \"pass\","`,
			},
		},
		{
			name: "a difference made up",
			mutate: func(t *testing.T, f *fixture) {
				f.editText(t, "evidence/TARGETS.md", "all 7 runs identical", "1 of 7 runs DIFFER")
			},
			want: []string{
				`TARGETS.md: differs from the audit's own rendering: line 27: expected "- mirrors the native volatile store: all 7 runs identical", observed "- mirrors the native volatile store: 1 of 7 runs DIFFER"`,
			},
		},
		{
			name: "a difference recorded in targets.json",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					targetRun(d, "effectserver", "body_conflict")["mirror"] = []any{"effects: 1 natively, 2 as a target"}
				})
			},
			want: []string{`targets.json: /targets/0/runs/3: additionalProperties 'mirror' not allowed`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newMirrorFixture(t)
			tt.mutate(t, f)
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, r, messages(r), tt.want, "")
			if tt.want != nil {
				return
			}
			if r.Runs != 7 || r.TargetRuns != 7 {
				t.Errorf("%d store runs and %d target runs checked, want 7 and 7", r.Runs, r.TargetRuns)
			}
			if line := "\n- mirrors the native volatile store: " + tt.mirror + "\n"; !strings.Contains(string(mustRead(t, f.path("evidence/TARGETS.md"))), line) {
				t.Errorf("TARGETS.md has no line %q", line)
			}
			v := f.readVerdicts(t)
			if got := v.Targets[0].Runs[1].Mirror; v.Targets[0].Runs[1].Case != "keyed_lost_reply" || !slices.Equal(got, tt.diffs) {
				t.Errorf("verdicts.json: %s on effectserver: mirror %q, want keyed_lost_reply's %q", v.Targets[0].Runs[1].Case, got, tt.diffs)
			}
			validVerdicts(t, f)
		})
	}
}

// Ensure -case does not narrow what the audit derives: every run on a
// target is judged, and a forged TARGETS.md row of another case fails.
func TestAuditTargetsNarrowed(t *testing.T) {
	f := newTargetFixture(t)
	f.forgeRow(t)
	want := []string{forgedRowFailure}
	for _, only := range []string{"keyed_lost_reply", "restart_after_reply"} {
		r, err := Audit(Options{Root: f.root, Evidence: f.evidence, Case: only})
		if err != nil {
			t.Fatal(err)
		}
		if got := messages(r); !slices.Equal(got, want) || r.TargetRuns != 29 {
			t.Errorf("-case %s: %d target runs, failures:\n%s\nwant 29, failures:\n%s", only, r.TargetRuns, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

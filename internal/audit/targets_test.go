package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// newTargetFixture is a mini checkout holding the repo's real schema/ and,
// pinned in testdata/targets (see its README.md), the case files and the
// three target folders of a real plain run, with a targets-only evidence
// folder (what runner -target writes) holding that run's targets.json and
// TARGETS.md, and a manifest and statement with computed hashes.
func newTargetFixture(t *testing.T) *fixture {
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
		"protocol": map[string]any{
			"key_header": "Idempotency-Key", "replayed_header": "Idempotency-Replayed",
			"fault_header": "X-Lab-Fault", "key_pattern": "[A-Za-z0-9_-]{1,64}",
			"default_body": "add-one", "capacity": 64, "max_body": 4096, "wait_ms": 5000,
			"slow_ms": 120, "crash_exit_code": 23, "client_timeout_ms": 5000,
		},
		"selection": map[string]any{"cases": cases, "stores": []string{}, "targets": names, "experiments": []string{}},
		"flags":     map[string]string{},
		"targets":   entries,
		"sources":   map[string]string{},
		"files":     map[string]string{},
	})
	f.rehashTargets(t)
	return f
}

// rehashTargets recomputes the manifest's files and sources of a target
// fixture (every source folder walked, written independently of the code
// under test) and its statement.
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
			if n := strings.TrimPrefix(rel, "evidence/"); n != "manifest.json" && !isDerived(n) {
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

// targetRun returns the run of case cname on target tname, for edits.
func targetRun(doc map[string]any, tname, cname string) map[string]any {
	for _, r := range targetOf(doc, tname)["runs"].([]any) {
		if rm := r.(map[string]any); rm["case"] == cname {
			return rm
		}
	}
	panic("no run " + cname + " on " + tname)
}

// forge edits targets.json, then, as a careful forger would, re-renders
// TARGETS.md from it and rehashes, so that each test breaks one rule.
func (f *fixture) forge(t *testing.T, edit func(doc map[string]any)) {
	t.Helper()
	f.editJSON(t, "evidence/targets.json", edit)
	f.renderTargets(t)
	f.rehashTargets(t)
}

// renderTargets rewrites TARGETS.md from targets.json as recorded (the
// audit's renderer over the recorded verdicts, not the audit's own).
func (f *fixture) renderTargets(t *testing.T) {
	t.Helper()
	schemas, err := LoadSchemas(f.root)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.readJSON(t, "evidence/targets.json")
	var views []*targetView
	for _, x := range doc["targets"].([]any) {
		tm := x.(map[string]any)
		spec, err := schemas.readTargetSpec([]byte(tm["target_json"].(string)))
		if err != nil {
			return // a forged target.json: TARGETS.md left as it was
		}
		v := &targetView{name: tm["name"].(string), summary: spec.summary, spec: spec, runtime: tm["runtime"].(string), skipped: tm["skipped"].(string)}
		v.libraries, _ = tm["libraries"].([]any)
		for _, r := range tm["runs"].([]any) {
			v.runs = append(v.runs, recordedRun(r.(map[string]any)))
		}
		views = append(views, v)
	}
	f.write(t, "evidence/"+TargetsReportFile, string(targetsReport(views)))
}

// rejudge sets the verdict of case cname on target tname to what the
// audit's own judge gives (a forger who changed an observation and made
// the verdict fit it).
func (f *fixture) rejudge(t *testing.T, doc map[string]any, tname, cname string) {
	t.Helper()
	schemas, err := LoadSchemas(f.root)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := LoadCases(f.root, schemas)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := schemas.readTargetSpec([]byte(targetOf(doc, tname)["target_json"].(string)))
	if err != nil {
		t.Fatal(err)
	}
	rm := targetRun(doc, tname, cname)
	var calls []obsCall
	for _, c := range rm["calls"].([]any) {
		calls = append(calls, readObsCall(c))
	}
	i := slices.IndexFunc(cases, func(c *Case) bool { return c.Name == cname })
	v, err := judgeTarget(cases[i], spec, number(rm["counter"]), calls)
	if err != nil {
		t.Fatal(err)
	}
	rm["verdict"] = verdictDoc(v)
}

// verdictDoc is a verdict as targets.json records it.
func verdictDoc(v tVerdict) map[string]any {
	list := func(fs []tFinding) []any {
		out := []any{}
		for _, f := range fs {
			m := map[string]any{"rule": f.rule, "call": nil, "detail": f.detail}
			if f.call >= 0 {
				m["call"] = jsonNum(callField(f.call))
			}
			if f.limitation != "" {
				m["limitation"] = f.limitation
			}
			out = append(out, m)
		}
		return out
	}
	return map[string]any{"safety": v.safety, "effects": jsonNum(strconv.FormatInt(v.effects, 10)),
		"sound_effects": jsonNum(strconv.FormatInt(v.soundEffects, 10)), "findings": list(v.findings), "deviations": list(v.deviations)}
}

// Ensure the real runs on targets pass, and that every claim of the target
// evidence, forged on its own (TARGETS.md rendered again where the forgery
// is in targets.json), fails with a line naming what was forged.
func TestAuditTargets(t *testing.T) {
	const (
		express = "express-idempotency"
		redis   = "node-idempotency-redis"
	)
	tests := []struct {
		name   string
		mutate func(t *testing.T, f *fixture)
		want   []string // exact failure lines, in order; nil: pass
	}{
		{name: "pass", mutate: func(t *testing.T, f *fixture) {}},
		{
			name: "a flipped safety verdict",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					targetRun(d, redis, "restart_after_reply")["verdict"].(map[string]any)["safety"] = "pass"
				})
			},
			want: []string{
				`targets.json: target node-idempotency-redis, case restart_after_reply: verdict.safety: expected "violation" (the audit's own judge), observed "pass"`,
				`TARGETS.md: differs from the audit's own rendering of targets.json: line 249: expected "| restart_after_reply | 1 (1) | violation | — | stuck_key: the last call with key \"same\" got 409: the key was left ...", observed "| restart_after_reply | 1 (1) | pass | — | stuck_key: the last call with key \"same\" got 409: the key was left in pr..."`,
			},
		},
		{
			name: "a removed finding",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					v := targetRun(d, redis, "crash_before_effect")["verdict"].(map[string]any)
					v["findings"] = v["findings"].([]any)[:1]
				})
			},
			want: []string{
				`targets.json: target node-idempotency-redis, case crash_before_effect: verdict.findings: expected 2 (the audit's own judge); not observed: stuck_key (call 1), observed 1`,
				`TARGETS.md: differs from the audit's own rendering of targets.json: line 250: expected "| crash_before_effect | 0 (1) | violation | — | lost_effect: 0 effects applied; a sound implementation applies 1; s...", observed "| crash_before_effect | 0 (1) | violation | — | lost_effect: 0 effects applied; a sound implementation applies 1 |"`,
			},
		},
		{
			name: "an edited detail",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					v := targetRun(d, express, "restart_after_reply")["verdict"].(map[string]any)
					v["findings"].([]any)[0].(map[string]any)["detail"] = "1 effect applied; a sound implementation applies 1"
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case restart_after_reply: verdict.findings[0].detail: expected "2 effects applied; a sound implementation applies 1" (the audit's own judge), observed "1 effect applied; a sound implementation applies 1"`,
				`TARGETS.md: differs from the audit's own rendering of targets.json: line 26: expected "| restart_after_reply | 2 (1) | limitation | replay_marker | duplicate_effect: 2 effects applied; a sound implementat...", observed "| restart_after_reply | 2 (1) | limitation | replay_marker | duplicate_effect: 1 effect applied; a sound implementati..."`,
			},
		},
		{
			name: "a not_run added to hide a violating run",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					r := targetRun(d, redis, "crash_after_effect")
					r["not_run"] = "the case runs 1 replicas; the target claims no shared store"
					for k, v := range map[string]any{"counter": nil, "exit_codes": []any{}, "calls": []any{}, "verdict": nil, "mirror": nil, "detail": nil} {
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
				f.forge(t, func(d map[string]any) {
					targetRun(d, express, "crash_after_effect")["counter"] = jsonNum("1")
					f.rejudge(t, d, express, "crash_after_effect")
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case crash_after_effect: counter: expected 2 (the effects in the sink's journal), observed 1`,
			},
		},
		{
			name: "a journal entry whose body no call sent",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					j := targetRun(d, express, "keyed_lost_reply")["detail"].(map[string]any)["journal"].([]any)
					sum := sha256.Sum256([]byte("add-two"))
					j[0].(map[string]any)["body_sha256"] = hex.EncodeToString(sum[:])
				})
			},
			want: []string{
				`targets.json: target express-idempotency, case keyed_lost_reply: detail.journal[0].body_sha256: expected the SHA-256 of a body one of the run's calls sent, observed "dc670e3b0a0a9c516df9e75e9e6788588e4f1a91d392e0632e688a72659278c1"`,
			},
		},
		{
			name: "an edited digest",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) { targetOf(d, express)["digest"] = strings.Repeat("1", 64) })
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
					m["targets"].([]any)[0].(map[string]any)["digest"] = strings.Repeat("1", 64)
				})
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: digest: expected cf4f9759dd55a4c162c60276cd0468edee9b0caccf689fd5c0c84f54f1c98942 (the audit's own digest of targets/express-idempotency in the checkout), observed 1111111111111111111111111111111111111111111111111111111111111111`,
			},
		},
		{
			name: "an edited library version",
			mutate: func(t *testing.T, f *fixture) {
				edit := func(tm map[string]any) { tm["libraries"].([]any)[0].(map[string]any)["version"] = "1.0.7" }
				f.forge(t, func(d map[string]any) { edit(targetOf(d, express)) })
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { edit(m["targets"].([]any)[0].(map[string]any)) })
				f.rehashTargets(t)
			},
			want: []string{
				`targets.json: target express-idempotency: libraries: expected [{"name":"express-idempotency","version":"1.0.6"},{"name":"express","version":"4.22.3"}] (as targets/express-idempotency/package-lock.json pins them), observed [{"name":"express-idempotency","version":"1.0.7"},{"name":"express","version":"4.22.3"}]`,
			},
		},
		{
			name: "target_json claims a durable store, the verdicts judged again",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					tm := targetOf(d, express)
					tm["target_json"] = strings.Replace(tm["target_json"].(string), `"durable": false`, `"durable": true`, 1)
					for _, c := range []string{"restart_after_reply", "crash_after_effect", "crash_after_record"} {
						f.rejudge(t, d, express, c)
					}
				})
			},
			want: []string{
				`targets.json: target express-idempotency: target_json: differs from targets/express-idempotency/target.json in the checkout: line 15: expected "  \"claims\": {\"durable\": false, \"shared_store\": false, \"capacity\": null, \"max_body\": 102400},", observed "  \"claims\": {\"durable\": true, \"shared_store\": false, \"capacity\": null, \"max_body\": 102400},"`,
			},
		},
		{
			name: "TARGETS.md edited",
			mutate: func(t *testing.T, f *fixture) {
				data, err := os.ReadFile(f.path("evidence/TARGETS.md"))
				if err != nil {
					t.Fatal(err)
				}
				f.write(t, "evidence/TARGETS.md", strings.Replace(string(data), "| restart_after_reply | 1 (1) | violation |", "| restart_after_reply | 1 (1) | pass |", 1))
				f.rehashTargets(t)
			},
			want: []string{
				`TARGETS.md: differs from the audit's own rendering of targets.json: line 249: expected "| restart_after_reply | 1 (1) | violation | — | stuck_key: the last call with key \"same\" got 409: the key was left ...", observed "| restart_after_reply | 1 (1) | pass | — | stuck_key: the last call with key \"same\" got 409: the key was left in pr..."`,
			},
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
			name: "a run dropped",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					tm := targetOf(d, redis)
					runs := tm["runs"].([]any)
					tm["runs"] = slices.Delete(slices.Clone(runs), 5, 6)
				})
			},
			want: []string{
				`targets.json: target node-idempotency-redis: runs: expected one per case of manifest.json selection.cases, in its order (21), observed 20: runs[5] is crash_after_effect, want crash_before_effect`,
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
			if got := messages(r); !slices.Equal(got, tt.want) {
				t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// Ensure the PASS line of a targets-only folder counts the runs on targets
// and says no store ran, and a note says what is not re-derived: a
// target's observations.
func TestTargetsPassLine(t *testing.T) {
	f := newTargetFixture(t)
	r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	pass, _, _ := strings.Cut(b.String(), "\n")
	want := regexp.MustCompile(`^PASS: 29 target runs on 3 targets \(express-idempotency, node-idempotency-memory, node-idempotency-redis; 34 not run\), 100 calls, [0-9]+ checks; 2 files and [0-9]+ sources verified; partial: stores: none \(runs on targets only\); experiments: none$`)
	if !want.MatchString(pass) {
		t.Errorf("PASS line %q, want it to match %s", pass, want)
	}
	if !strings.Contains(b.String(), "note: targets.json: a target's observations are not byte-identical from run to run") {
		t.Errorf("no note on the observations of targets:\n%s", b.String())
	}
	if r.TargetRuns != 29 || r.TargetsNotRun != 34 || len(r.Targets) != 3 || r.TargetCalls != 100 {
		t.Errorf("report counts: %d runs, %d not run, %d targets, %d calls; want 29, 34, 3, 100", r.TargetRuns, r.TargetsNotRun, len(r.Targets), r.TargetCalls)
	}
}

// Ensure the folder and selection rules of targets: a folder outside the
// checkout is not re-read (a note says so), a skipped target has no runs
// (a note), node_modules and the setup marker are no part of a digest, a
// symlink in a folder is refused, and the selection decides which target
// files must be there.
func TestAuditTargetFolders(t *testing.T) {
	const express = "express-idempotency"
	manifestTarget := func(m map[string]any, i int) map[string]any { return m["targets"].([]any)[i].(map[string]any) }
	tests := []struct {
		name   string
		mutate func(t *testing.T, f *fixture)
		want   []string // exact failure lines; nil: pass
		note   string   // a note that must be printed
	}{
		{
			name: "pass/a folder outside the checkout is not re-read",
			mutate: func(t *testing.T, f *fixture) {
				f.forge(t, func(d map[string]any) {
					tm := targetOf(d, express)
					tm["dir"] = ""
					tm["target_json"] = strings.Replace(tm["target_json"].(string), "README shows", "README says", 1)
				})
				f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { manifestTarget(m, 0)["dir"] = "" })
				f.rehashTargets(t)
			},
			note: "target express-idempotency ran from a folder outside the checkout (dir empty): its target.json, folder digest and library versions were not re-read",
		},
		{
			name: "pass/a skipped target",
			mutate: func(t *testing.T, f *fixture) {
				const why = "redis-server not found (Debian's redis-server package)"
				f.forge(t, func(d map[string]any) {
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
				f.forge(t, func(d map[string]any) {
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
				`targets.json: target express-idempotency: runs: 21, but the target was skipped (node not found (Debian's nodejs package)): a skipped target runs no case`,
			},
		},
		{
			name: "pass/node_modules and the setup marker are no part of the digest",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "targets/express-idempotency/node_modules/express/index.js", "module.exports = 1\n")
				f.write(t, "targets/express-idempotency/.idemlab-setup", "cf4f\n")
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
				`targets.json: target express-idempotency: digest: expected 8e04db90eb41680b4e23825d9dc423cc2f3f61d550a996dc4133420ca87fd930 (the audit's own digest of targets/express-idempotency in the checkout), observed cf4f9759dd55a4c162c60276cd0468edee9b0caccf689fd5c0c84f54f1c98942`,
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
				f.forge(t, func(d map[string]any) { targetOf(d, express)["dir"] = "../express-idempotency" })
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
				`manifest.json: selection.targets: empty, but manifest.files lists TARGETS.md`,
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
				`targets.json: target express-idempotency: runs: expected one per case of manifest.json selection.cases, in its order (0), observed 21: runs[0] is unkeyed_lost_reply, want (none)`,
				`targets.json: target node-idempotency-memory: runs: expected one per case of manifest.json selection.cases, in its order (0), observed 21: runs[0] is unkeyed_lost_reply, want (none)`,
				`targets.json: target node-idempotency-redis: runs: expected one per case of manifest.json selection.cases, in its order (0), observed 21: runs[0] is unkeyed_lost_reply, want (none)`,
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
			if got := messages(r); !slices.Equal(got, tt.want) {
				t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if tt.note != "" && !slices.Contains(r.Notes, tt.note) {
				t.Errorf("notes %q, want %q", r.Notes, tt.note)
			}
		})
	}
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
// run, with the verdict the audit's judge gives it (a careful forger's).
func newMirrorFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	for _, c := range f.caseDocs(t) {
		entries, _ := os.ReadDir(f.path("cases"))
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), "-"+c.name+".json") {
				f.editJSON(t, "cases/"+e.Name(), func(d map[string]any) {
					d["target"] = map[string]any{"sound": "volatile", "tests": []any{"duplicate_effect"}}
				})
			}
		}
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
			"calls": rm["calls"], "verdict": nil, "mirror": nil,
			"detail": map[string]any{"wall_ms": 1, "processes": procs, "calls": calls, "log": []any{}, "journal": []any{}, "exchanges": []any{}}})
	}
	doc := map[string]any{"schema_version": 1, "targets": []any{map[string]any{
		"name": "effectserver", "dir": "targets/effectserver", "target_json": mirrorTarget, "digest": tm["digest"],
		"libraries": []any{}, "runtime": "", "skipped": "", "runs": runs}}}
	for _, r := range runs {
		f.rejudge(t, doc, "effectserver", r.(map[string]any)["case"].(string))
	}
	f.writeJSON(t, "evidence/targets.json", doc)
	f.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
		m["selection"].(map[string]any)["targets"] = []any{"effectserver"}
		m["targets"] = []any{tm}
	})
	f.renderTargets(t)
	f.rehashTargets(t)
	return f
}

// Ensure a target that mirrors a store passes where it observed what the
// native runs did, and that a difference it hides in its mirror list, or
// words otherwise, is caught; and that a plain run's two halves, stores
// and targets, are audited together.
func TestAuditMirror(t *testing.T) {
	const diff = `call 1: 200 "1" replayed=true natively, 200 "2" replayed=true as a target`
	tests := []struct {
		name string
		edit func(t *testing.T, f *fixture, d map[string]any)
		want []string
	}{
		{name: "pass", edit: func(t *testing.T, f *fixture, d map[string]any) {}},
		{
			name: "pass/a difference recorded",
			edit: func(t *testing.T, f *fixture, d map[string]any) {
				r := targetRun(d, "effectserver", "keyed_lost_reply")
				r["calls"].([]any)[1].(map[string]any)["body"] = "2"
				r["mirror"] = []any{diff}
				f.rejudge(t, d, "effectserver", "keyed_lost_reply")
			},
		},
		{
			name: "a difference hidden",
			edit: func(t *testing.T, f *fixture, d map[string]any) {
				r := targetRun(d, "effectserver", "keyed_lost_reply")
				r["calls"].([]any)[1].(map[string]any)["body"] = "2"
				f.rejudge(t, d, "effectserver", "keyed_lost_reply")
			},
			want: []string{
				`targets.json: target effectserver, case keyed_lost_reply: mirror: expected ["call 1: 200 \"1\" replayed=true natively, 200 \"2\" replayed=true as a target"] (the audit's own comparison with the native volatile run), observed null`,
				`TARGETS.md: differs from the audit's own rendering of targets.json: line 19: expected "- mirrors the native volatile store: 1 of 7 runs DIFFER", observed "- mirrors the native volatile store: all 7 runs identical"`,
			},
		},
		{
			name: "a difference made up",
			edit: func(t *testing.T, f *fixture, d map[string]any) {
				targetRun(d, "effectserver", "body_conflict")["mirror"] = []any{"effects: 1 natively, 2 as a target"}
			},
			want: []string{
				`targets.json: target effectserver, case body_conflict: mirror: expected null (no differences), observed ["effects: 1 natively, 2 as a target"]`,
				`TARGETS.md: differs from the audit's own rendering of targets.json: line 19: expected "- mirrors the native volatile store: all 7 runs identical", observed "- mirrors the native volatile store: 1 of 7 runs DIFFER"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newMirrorFixture(t)
			f.forge(t, func(d map[string]any) { tt.edit(t, f, d) })
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			if got := messages(r); !slices.Equal(got, tt.want) {
				t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if tt.want == nil && (r.Runs != 7 || r.TargetRuns != 7) {
				t.Errorf("%d store runs and %d target runs checked, want 7 and 7", r.Runs, r.TargetRuns)
			}
		})
	}
}

// Ensure -case narrows the runs on targets judged again to that case's,
// and the narrowed case is still judged.
func TestAuditTargetsNarrowed(t *testing.T) {
	f := newTargetFixture(t)
	f.forge(t, func(d map[string]any) {
		targetRun(d, "node-idempotency-redis", "restart_after_reply")["verdict"].(map[string]any)["safety"] = "pass"
	})
	for _, tt := range []struct {
		only string
		want []string
		runs int
	}{
		{"keyed_lost_reply", nil, 3},
		{"restart_after_reply", []string{`targets.json: target node-idempotency-redis, case restart_after_reply: verdict.safety: expected "violation" (the audit's own judge), observed "pass"`,
			`TARGETS.md: differs from the audit's own rendering of targets.json: line 249: expected "| restart_after_reply | 1 (1) | violation | — | stuck_key: the last call with key \"same\" got 409: the key was left ...", observed "| restart_after_reply | 1 (1) | pass | — | stuck_key: the last call with key \"same\" got 409: the key was left in pr..."`}, 3},
	} {
		r, err := Audit(Options{Root: f.root, Evidence: f.evidence, Case: tt.only})
		if err != nil {
			t.Fatal(err)
		}
		if got := messages(r); !slices.Equal(got, tt.want) || r.TargetRuns != tt.runs {
			t.Errorf("-case %s: %d target runs, failures:\n%s\nwant %d, failures:\n%s", tt.only, r.TargetRuns, strings.Join(got, "\n"), tt.runs, strings.Join(tt.want, "\n"))
		}
	}
}

func callField(call int) string {
	if call < 0 {
		return "null"
	}
	return strconv.Itoa(call)
}

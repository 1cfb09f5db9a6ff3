package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The specification corpus (testdata/spec, see its README.md): inputs and
// the outputs the audit's own checker and renderers must give, the same
// the lab's must give, so that the two sides, which import nothing of each
// other, are held to one set of files.
const specRoot = "../../testdata/spec"

// specCrashExitCode is manifest.json's protocol.crash_exit_code for the
// corpus histories: the exit status of a server a crash fault stopped.
const specCrashExitCode = 23

// specDoc decodes JSON into plain values, numbers as json.Number, for a
// comparison that ignores member order and layout.
func specDoc(t *testing.T, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// specFindings is the audit's findings file for h: the counts chaos.json
// records that a history decides, the verdict's totals and rules, and every
// finding by rule, intent and key, in the checker's order (the checker
// keeps keepFindings of each rule: no corpus history has more).
func specFindings(h *chaosHistory) map[string]any {
	c := h.check(specCrashExitCode)
	counts := map[string]any{"faults": c.faults}
	for k, v := range c.counts {
		counts[k] = v
	}
	var violations, shown int64
	findings := []any{}
	for _, f := range c.findings {
		findings = append(findings, map[string]any{"rule": f.rule, "intent": f.intent, "key": f.key})
	}
	rules := []any{}
	for _, r := range chaosRules {
		if h.promised(r) {
			violations += c.fired[r]
		} else {
			shown += c.fired[r]
		}
		rules = append(rules, map[string]any{"rule": r, "promised": h.promised(r), "count": c.fired[r]})
	}
	return map[string]any{
		"counts":   counts,
		"verdict":  map[string]any{"ok": violations == 0, "violations": violations, "shown": shown, "rules": rules},
		"findings": findings,
	}
}

// Ensure the audit's own checker gives every corpus history exactly the
// findings file beside it, the file the lab's checker must give too.
func TestSpecHistories(t *testing.T) {
	dir := filepath.Join(specRoot, "chaos")
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 10 {
		t.Fatalf("%d histories in %s, want the corpus (at least 10)", len(paths), dir)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			h, err := readChaosHistory(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("readChaosHistory(%s) error = %v", p, err)
			}
			got, err := json.MarshalIndent(specFindings(h), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			fp := filepath.Join(dir, name+".findings.json")
			want, err := os.ReadFile(fp)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(specDoc(t, got), specDoc(t, want)) {
				t.Errorf("check(%s) gives\n%s\nwant (%s)\n%s", p, got, fp, want)
			}
		})
	}
}

// specRuns reads a corpus results.json as the audit reads results.json:
// the runs by (case, store), and the stores in the order it first names
// them.
func specRuns(t *testing.T, s *Schemas, path string) (map[runKey]map[string]any, []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeJSON(data, capResultsJSON)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if problems := validate(s.Results, v); problems != nil {
		t.Fatalf("%s: %s", path, strings.Join(problems, "; "))
	}
	runs := map[runKey]map[string]any{}
	var stores []string
	arr, _ := v.(map[string]any)["runs"].([]any)
	for _, r := range arr {
		m, _ := r.(map[string]any)
		c, _ := str(m, "case")
		st, _ := str(m, "store")
		if _, dup := runs[runKey{c, st}]; dup {
			t.Fatalf("%s: a second run of case %s on %s", path, c, st)
		}
		runs[runKey{c, st}] = m
		if !slices.Contains(stores, st) {
			stores = append(stores, st)
		}
	}
	return runs, stores
}

// Ensure the audit's own REPORT.md renderer gives the corpus REPORT.md
// byte for byte from the corpus case files and results.json, and that the
// audit's verdict on every run of the corpus (all matching; two that do
// not) is the verdict the corpus REPORT.md gives it. The audit renders
// REPORT.md only when every run matches (the runner's mismatch lines are
// its own wording), so for the mismatch folder the verdicts are compared.
func TestSpecReport(t *testing.T) {
	schemas, err := LoadSchemas(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(specRoot, "report")
	cases, err := LoadCases(root, schemas)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir        string
		mismatches int
	}{
		{root, 0},
		{filepath.Join(root, "mismatch"), 2},
	} {
		t.Run(filepath.Base(tt.dir), func(t *testing.T) {
			runs, stores := specRuns(t, schemas, filepath.Join(tt.dir, "results.json"))
			if got, want := len(runs), len(cases)*len(stores); got != want {
				t.Fatalf("%d runs, want %d (%d cases × %d stores)", got, want, len(cases), len(stores))
			}
			want, err := os.ReadFile(filepath.Join(tt.dir, "REPORT.md"))
			if err != nil {
				t.Fatal(err)
			}
			mismatches := 0
			for _, c := range cases {
				for _, s := range stores {
					run := runs[runKey{c.Name, s}]
					verdict := "matches"
					if exp := c.Expect[s]; exp == nil || run == nil || !meets(exp, run) {
						verdict, mismatches = "MISMATCH", mismatches+1
					}
					row := "\n| " + c.Name + " | " + s + " | "
					line := "(no row)"
					if i := bytes.Index(want, []byte(row)); i >= 0 {
						line, _, _ = strings.Cut(string(want[i+1:]), "\n")
					}
					if !strings.HasSuffix(line, " | "+verdict+" |") {
						t.Errorf("case %s, store %s: the audit's verdict is %s; REPORT.md's row: %q", c.Name, s, verdict, line)
					}
				}
			}
			if mismatches != tt.mismatches {
				t.Errorf("%d runs do not meet their case, want %d", mismatches, tt.mismatches)
			}
			if mismatches > 0 {
				return
			}
			if got := reportText(cases, stores, runs); !bytes.Equal(got, want) {
				t.Errorf("reportText() differs from %s: %s", filepath.Join(tt.dir, "REPORT.md"), firstDiff(want, got))
			}
		})
	}
}

// Ensure the audit's own jitter model finds nothing to fault in the corpus
// jitter.json, and its own drawing of the model is the corpus jitter.svg
// byte for byte.
func TestSpecJitter(t *testing.T) {
	dir := filepath.Join(specRoot, "jitter")
	data, err := os.ReadFile(filepath.Join(dir, JitterFile))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := decodeJSON(data, capJitterJSON)
	if err != nil {
		t.Fatalf("%s: %v", JitterFile, err)
	}
	a := &auditor{report: &Report{}}
	a.checkJitter(doc.(map[string]any))
	if len(a.report.Failures) > 0 || a.report.Checks == 0 {
		t.Errorf("checkJitter(%s): %d checks, failures %+v; want checks and no failure", JitterFile, a.report.Checks, a.report.Failures)
	}
	svg, err := os.ReadFile(filepath.Join(dir, JitterSVGFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := jitterSVG(stormModel()); !bytes.Equal(got, svg) {
		t.Errorf("jitterSVG() differs from %s: %s", filepath.Join(dir, JitterSVGFile), firstDiff(svg, got))
	}
}

// specCapacity is manifest.json's protocol.capacity for the targets corpus:
// the lab's default capacity, which a case that fills the registry needs
// a target to claim.
const specCapacity = 64

// Ensure the audit's own placement rules, judge and mirror comparison give
// every run of the targets corpus exactly the not_run, verdict and mirror
// list recorded beside it (the lab's NotRun, Judge and Mirror must give
// them too), and its renderer the corpus TARGETS.md.
func TestSpecTargets(t *testing.T) {
	root := filepath.Join(specRoot, "targets")
	schemas, err := LoadSchemas(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := LoadCases(root, schemas)
	if err != nil {
		t.Fatal(err)
	}
	doc := specJSONFile(t, schemas, filepath.Join(root, TargetsFile))
	native := specJSONFile(t, nil, filepath.Join(root, "native.json"))
	var views []*targetView
	judged, notRun := 0, 0
	for _, x := range doc["targets"].([]any) {
		tm := x.(map[string]any)
		spec, err := schemas.readTargetSpec([]byte(tm["target_json"].(string)))
		if err != nil {
			t.Fatal(err)
		}
		v := &targetView{name: spec.name, summary: spec.summary, spec: spec, runtime: tm["runtime"].(string), skipped: tm["skipped"].(string)}
		v.libraries, _ = tm["libraries"].([]any)
		for _, r := range tm["runs"].([]any) {
			rm := r.(map[string]any)
			rec := recordedRun(rm)
			i := slices.IndexFunc(cases, func(c *Case) bool { return c.Name == rec.caseName })
			if i < 0 {
				t.Fatalf("target %s: run of case %q: no such case file", v.name, rec.caseName)
			}
			c := cases[i]
			if got := targetNotRun(c, spec, specCapacity); got != rec.notRun {
				t.Errorf("target %s, case %s: targetNotRun = %q, want %q", v.name, c.Name, got, rec.notRun)
			}
			own := rec
			if rec.notRun == "" {
				judged++
				var calls []obsCall
				for _, c := range rec.calls {
					calls = append(calls, readObsCall(c))
				}
				got, err := judgeTarget(c, spec, number(rm["counter"]), calls)
				if err != nil {
					t.Fatalf("target %s, case %s: %v", v.name, c.Name, err)
				}
				if !reflect.DeepEqual(got, rec.verdict) {
					t.Errorf("target %s, case %s: judgeTarget =\n%+v\nwant\n%+v", v.name, c.Name, got, rec.verdict)
				}
				codes, _ := rm["exit_codes"].([]any)
				var mirror []string
				if n := nativeRun(native, c.Name, spec.mirrors); n != nil {
					mirror = mirrorDiffs(n, number(rm["counter"]), codes, calls)
				}
				if !slices.Equal(mirror, rec.mirror) {
					t.Errorf("target %s, case %s: mirrorDiffs = %q, want %q", v.name, c.Name, mirror, rec.mirror)
				}
				own.verdict, own.mirror = got, mirror
			} else {
				notRun++
			}
			v.runs = append(v.runs, own)
		}
		views = append(views, v)
	}
	if judged < 20 || notRun < 8 {
		t.Errorf("%d runs judged and %d not run, want the corpus (at least 20 and 8)", judged, notRun)
	}
	want, err := os.ReadFile(filepath.Join(root, TargetsReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := targetsReport(views); !bytes.Equal(got, want) {
		t.Errorf("targetsReport differs from %s: %s", TargetsReportFile, firstDiff(want, got))
	}
}

// specJSONFile reads a corpus JSON file strictly, checked against the
// targets schema when schemas is not nil.
func specJSONFile(t *testing.T, schemas *Schemas, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeJSON(data, capTargetsJSON)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if schemas != nil {
		if lines := validate(schemas.Targets, v); len(lines) > 0 {
			t.Fatalf("%s: %s", path, strings.Join(lines, "; "))
		}
	}
	return v.(map[string]any)
}

// replaySpec reads the corpus history name, judges it, runs the
// consistency checks with the parameters its header records (and the
// lab's defaults of the others), and streams it a second time into a
// timeline.
func replaySpec(t *testing.T, name string) (*chaosHistory, *timeline) {
	t.Helper()
	p := filepath.Join(specRoot, "chaos", name+".jsonl")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	h, err := readChaosHistory(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("readChaosHistory(%s) error = %v", p, err)
	}
	tl := newTimeline(h, h.check(specCrashExitCode))
	h.checkConsistency(chaosRunParams{durationMS: h.durationMS, killEveryMS: h.killEveryMS, maxAttempts: 8, quietAttempts: 40})
	if err := replayHistory(bytes.NewReader(data), tl); err != nil {
		t.Fatalf("replayHistory(%s) error = %v", p, err)
	}
	return h, tl
}

// Ensure the audit's own timeline of every corpus history drawn beside it
// (NAME.svg, the lab's drawing) is that file byte for byte.
func TestSpecTimelines(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(specRoot, "chaos", "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 8 {
		t.Fatalf("%d timelines in the corpus, want its stores' and targets' (at least 8)", len(paths))
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".svg")
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			_, tl := replaySpec(t, name)
			if got := tl.svg(); !bytes.Equal(got, want) {
				t.Errorf("the audit's timeline of %s differs from %s: %s", name, p, firstDiff(want, got))
			}
		})
	}
}

// Ensure the schedule drawn again from a real run's recorded seed and
// parameters is what its history shows, attempt by attempt and planned
// kill by planned kill, and nothing else of the consistency checks fires
// but where a cut leaves intents out (the corpus cuts keep every attempt
// of the intents they keep, and every server event).
func TestSpecSchedules(t *testing.T) {
	for _, name := range []string{"volatile-run", "durable-run", "express-run", "redis-run"} {
		t.Run(name, func(t *testing.T) {
			h, _ := replaySpec(t, name)
			for _, is := range h.issues {
				if is.rule != "attempts" && is.rule != "intent" { // a cut renumbers no intent, but leaves gaps
					t.Errorf("%s: %s", is.rule, is.text)
				}
			}
			if len(h.sched.kills(h.durationMS, h.killEveryMS)) == 0 {
				t.Error("no planned kill: the test checks none")
			}
		})
	}
}

package audit

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"idemlab/internal/audit/stormmodel"
)

// The specification corpus (testdata/spec, see its README.md): inputs and
// the outputs the audit's own checker and renderers must give, the same
// the lab's must give, so that the two sides, which import nothing of each
// other, are held to one set of files.
const specRoot = "../../testdata/spec"

// updateSpec rewrites the corpus's renderings (REPORT.md, TARGETS.md, the
// timelines) from the audit's renderers, after a deliberate change of a
// renderer: review the diff. Verdicts are never rewritten: an expected
// verdict is an answer worked out by hand.
var updateSpec = flag.Bool("update-spec", false, "rewrite the corpus's renderings from the audit's renderers")

// specRendering compares got with the corpus file path, or writes it
// there with -update-spec.
func specRendering(t *testing.T, path string, got []byte) {
	t.Helper()
	if *updateSpec {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the audit's rendering differs from %s (go test -run %s -update-spec rewrites it; review the diff): %s", path, t.Name(), firstDiff(want, got))
	}
}

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
// findings file beside it, worked out by hand.
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
			expected := specDoc(t, want).(map[string]any)
			var e specEntry
			e.Who, _ = expected["who"].(string)
			e.Why, _ = expected["why"].(string)
			e.check(t, fp)
			delete(expected, "who")
			delete(expected, "why")
			if !reflect.DeepEqual(specDoc(t, got), any(expected)) {
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

// specEntry is one hand-worked answer of the corpus: who worked it out and
// why it is right, beside the answer itself.
type specEntry struct {
	Who string `json:"who"`
	Why string `json:"why"`
}

// check fails t when the entry does not say who worked it out and why.
func (e specEntry) check(t *testing.T, what string) {
	t.Helper()
	if strings.TrimSpace(e.Who) == "" || strings.TrimSpace(e.Why) == "" {
		t.Errorf("%s: the corpus entry does not say who worked it out and why it is right", what)
	}
}

// Ensure every run of the report corpus gets the verdict its expected.json
// records (matches, or exactly its mismatch lines), and REPORT.md is the
// audit's rendering of those verdicts byte for byte.
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
	for _, dir := range []string{root, filepath.Join(root, "mismatch")} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			runs, stores := specRuns(t, schemas, filepath.Join(dir, "results.json"))
			var expected struct {
				Entries []struct {
					specEntry
					storeVerdict
				} `json:"entries"`
			}
			specRead(t, filepath.Join(dir, "expected.json"), &expected)
			if got, want := len(expected.Entries), len(cases)*len(stores); got != want {
				t.Fatalf("%d expected verdicts, want one per run: %d", got, want)
			}
			verdicts := map[runKey][]mismatch{}
			for _, e := range expected.Entries {
				k := runKey{e.Case, e.Store}
				e.check(t, k.String())
				i := slices.IndexFunc(cases, func(c *Case) bool { return c.Name == e.Case })
				if i < 0 || runs[k] == nil || cases[i].Expect[e.Store] == nil {
					t.Fatalf("%s: no such run, case or expectation", k)
				}
				found, _ := mismatches(cases[i].Expect[e.Store], runs[k])
				verdicts[k] = found
				if got := mismatchLines(found); len(found) == 0 != e.Matches || !slices.Equal(got, e.Mismatches) {
					t.Errorf("%s: mismatches %q, want %q (matches %v)", k, got, e.Mismatches, e.Matches)
				}
			}
			specRendering(t, filepath.Join(dir, ReportFile), reportText(cases, stores, runs, verdicts))
		})
	}
}

// specRead decodes a corpus JSON file into v.
func specRead(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
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
	if got := jitterSVG(stormmodel.Default); !bytes.Equal(got, svg) {
		t.Errorf("jitterSVG() differs from %s: %s", filepath.Join(dir, JitterSVGFile), firstDiff(svg, got))
	}
}

// specCapacity is manifest.json's protocol.capacity for the targets corpus:
// the lab's default capacity, which a case that fills the registry needs
// a target to claim.
const specCapacity = 64

// Ensure the audit's own placement rules, judge and mirror comparison give
// every run of the targets corpus exactly the not_run, verdict and mirror
// list its expected.json records, and its renderer the corpus TARGETS.md.
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
	var expected struct {
		About   string `json:"about"`
		Entries []struct {
			specEntry
			Target  string `json:"target"`
			Skipped string `json:"skipped"`
			targetRunVerdict
		} `json:"entries"`
	}
	specRead(t, filepath.Join(root, "expected.json"), &expected)
	want := map[string]targetRunVerdict{}
	for _, e := range expected.Entries {
		e.check(t, e.Target+"/"+e.Case)
		want[e.Target+"/"+e.Case] = e.targetRunVerdict
		if e.Skipped != "" {
			want[e.Target+"/"] = targetRunVerdict{NotRun: e.Skipped}
		}
	}
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
		if v.skipped != "" && want[v.name+"/"].NotRun != v.skipped {
			t.Errorf("target %s: skipped %q, and no entry of expected.json says so", v.name, v.skipped)
		}
		for _, r := range tm["runs"].([]any) {
			rm := r.(map[string]any)
			run := recordedRun(rm)
			i := slices.IndexFunc(cases, func(c *Case) bool { return c.Name == run.Case })
			if i < 0 {
				t.Fatalf("target %s: run of case %q: no such case file", v.name, run.Case)
			}
			c := cases[i]
			run.NotRun = targetNotRun(c, spec, specCapacity)
			if run.NotRun == "" {
				judged++
				var calls []obsCall
				for _, c := range run.calls {
					calls = append(calls, readObsCall(c))
				}
				if run.targetRunVerdict, err = judgeTarget(c, spec, number(rm["counter"]), calls, unforwarded(spec, c, mapOf(rm, "detail"))); err != nil {
					t.Fatalf("target %s, case %s: %v", v.name, c.Name, err)
				}
				codes, _ := rm["exit_codes"].([]any)
				if n := nativeRun(native, c.Name, spec.mirrors); n != nil {
					run.Mirror = mirrorDiffs(n, number(rm["counter"]), codes, calls)
				}
				run.targetRunVerdict = sumTrials([]runView{run}) // one trial each
			} else {
				notRun++
			}
			v.runs = append(v.runs, run)
		}
		views = append(views, v)
		for _, got := range targetVerdictOf(v).Runs {
			w, ok := want[v.name+"/"+got.Case]
			if !ok {
				t.Errorf("target %s, case %s: no entry in expected.json", v.name, got.Case)
				continue
			}
			if got := perRun(got); !reflect.DeepEqual(got, w) {
				t.Errorf("target %s, case %s: the audit's verdict\n%+v\nwant\n%+v", v.name, got.Case, got, w)
			}
		}
	}
	if judged < 20 || notRun < 8 {
		t.Errorf("%d runs judged and %d not run, want the corpus (at least 20 and 8)", judged, notRun)
	}
	specRendering(t, filepath.Join(root, TargetsReportFile), targetsReport(views))
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
// (NAME.svg, reviewed by hand) is that file byte for byte.
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
			_, tl := replaySpec(t, name)
			specRendering(t, p, tl.svg())
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
			if len(h.plannedKills(h.durationMS, h.killEveryMS)) == 0 {
				t.Error("no planned kill: the test checks none")
			}
		})
	}
}

// perRun is a verdict without what sums up a case's trials: the corpus
// holds one run's verdict per case (TestSumTrials works the trials out).
func perRun(v targetRunVerdict) targetRunVerdict {
	v.Trials, v.Example, v.TrialSafety, v.Tally, v.Racy, v.Rates = 0, 0, nil, safetyTally{}, false, nil
	return v
}

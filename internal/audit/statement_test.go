package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
)

// stamp writes evidence/statement.intoto.json for the fixture's current
// manifest, as a careful forger (or the runner) would: every listed file
// and manifest.json as subjects, the runs of results.json as tests (failed
// where the audit finds an expectation failure, so that each test breaks
// one rule at a time), the commit and the case files as configuration.
func (f *fixture) stamp(t *testing.T) {
	t.Helper()
	os.Remove(f.path("evidence/" + StatementFile))
	mb, err := os.ReadFile(f.path("evidence/manifest.json"))
	if err != nil {
		return
	}
	mv, err := decodeJSON(mb, capManifestJSON)
	m, _ := mv.(map[string]any)
	if err != nil || m == nil {
		return // a test of an unreadable manifest: no statement
	}
	failed := map[string]bool{}
	if r, err := Audit(Options{Root: f.root, Evidence: f.evidence, AllowDirty: true, AllowMutation: true}); err == nil {
		for _, x := range r.Failures {
			if x.Check == CheckExpectation {
				failed[x.Case+"/"+x.Store] = true
			}
		}
	}
	sel, _ := m["selection"].(map[string]any)
	tests := slices.DeleteFunc(f.resultsTests(t), func(n string) bool {
		c, s, _ := strings.Cut(n, "/")
		return !slices.Contains(stringList(sel, "cases"), c) || !slices.Contains(stringList(sel, "stores"), s)
	})
	f.writeJSON(t, "evidence/"+StatementFile, statementDoc(m, mb, tests, failed))
}

// resultsTests lists the runs of evidence/results.json as "case/store".
func (f *fixture) resultsTests(t *testing.T) []string {
	var out []string
	data, err := os.ReadFile(f.path("evidence/results.json"))
	if err != nil {
		return nil
	}
	v, err := decodeJSON(data, capResultsJSON)
	if err != nil {
		return nil
	}
	doc, _ := v.(map[string]any)
	runs, _ := doc["runs"].([]any)
	for _, r := range runs {
		m, _ := r.(map[string]any)
		c, _ := str(m, "case")
		s, _ := str(m, "store")
		out = append(out, c+"/"+s)
	}
	return out
}

// statementDoc renders a statement the way the runner does.
func statementDoc(m map[string]any, manifest []byte, tests []string, failed map[string]bool) map[string]any {
	files := stringMap(m, "files")
	sum := sha256.Sum256(manifest)
	files["manifest.json"] = hex.EncodeToString(sum[:])
	subjects := []any{}
	for _, n := range sortedKeys(files) {
		subjects = append(subjects, map[string]any{"name": n, "digest": map[string]any{"sha256": files[n]}})
	}
	passedT, failedT := []any{}, []any{}
	for _, n := range tests {
		if failed[n] {
			failedT = append(failedT, n)
		} else {
			passedT = append(passedT, n)
		}
	}
	result := "PASSED"
	if len(failedT) > 0 {
		result = "FAILED"
	}
	commit, _ := str(m, "source_commit")
	config := []any{map[string]any{"name": "source_commit", "digest": map[string]any{"gitCommit": commit}}}
	sources := stringMap(m, "sources")
	for _, p := range sortedKeys(sources) {
		if strings.HasPrefix(p, "cases/") {
			config = append(config, map[string]any{"name": p, "digest": map[string]any{"sha256": sources[p]}})
		}
	}
	return map[string]any{
		"_type": "https://in-toto.io/Statement/v1", "subject": subjects,
		"predicateType": "https://in-toto.io/attestation/test-result/v0.1",
		"predicate": map[string]any{"result": result, "configuration": config,
			"passedTests": passedT, "warnedTests": []any{}, "failedTests": failedT},
	}
}

// Ensure each forgery of the statement fails naming what was forged.
func TestStatementForged(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(st map[string]any)
		want string
	}{
		{"a failed test moved to passed", func(st map[string]any) {
			p := st["predicate"].(map[string]any)
			p["passedTests"] = append(p["passedTests"].([]any), "ghost_case/volatile")
		}, "predicate.passedTests: lists ghost_case/volatile, which is not a selected run of results.json"},
		{"a subject digest changed", func(st map[string]any) {
			s := st["subject"].([]any)[0].(map[string]any)
			s["digest"] = map[string]any{"sha256": strings.Repeat("0", 64)}
		}, ": sha256 0000000000000000000000000000000000000000000000000000000000000000, but "},
		{"a subject dropped", func(st map[string]any) {
			st["subject"] = st["subject"].([]any)[1:]
		}, ": missing (every evidence file and manifest.json is a subject)"},
		{"a case digest changed", func(st map[string]any) {
			c := st["predicate"].(map[string]any)["configuration"].([]any)[1].(map[string]any)
			c["digest"] = map[string]any{"sha256": strings.Repeat("1", 64)}
		}, "predicate.configuration[1]: expected"},
		{"the commit changed", func(st map[string]any) {
			c := st["predicate"].(map[string]any)["configuration"].([]any)[0].(map[string]any)
			c["digest"] = map[string]any{"gitCommit": strings.Repeat("a", 40)}
		}, "predicate.configuration[0]: expected"},
		{"result FAILED with no failed test", func(st map[string]any) {
			st["predicate"].(map[string]any)["result"] = "FAILED"
		}, "predicate.result: expected PASSED (0 failed tests), observed FAILED"},
		{"removed", nil, "statement.intoto.json: missing: the runner writes an in-toto Statement"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if tt.edit == nil {
				os.Remove(f.path("evidence/" + StatementFile))
			} else {
				st := f.readJSON(t, "evidence/"+StatementFile)
				tt.edit(st)
				f.writeJSON(t, "evidence/"+StatementFile, st)
			}
			r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, x := range r.Failures {
				got = append(got, x.Message)
			}
			if !slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, tt.want) }) {
				t.Errorf("failures = %q, want one containing %q", got, tt.want)
			}
		})
	}
}

// Ensure a run that fails its case is a failed test, and a statement that
// calls it passed is caught.
func TestStatementFailedMovedToPassed(t *testing.T) {
	f := newFixture(t)
	f.editJSON(t, "evidence/results.json", func(doc map[string]any) {
		run := doc["runs"].([]any)[0].(map[string]any)
		run["counter"] = jsonNum("99")
	})
	f.rehash(t)
	st := f.readJSON(t, "evidence/"+StatementFile)
	p := st["predicate"].(map[string]any)
	failedT := p["failedTests"].([]any)
	if len(failedT) != 1 {
		t.Fatalf("failedTests = %v, want the forged run", failedT)
	}
	r, err := Audit(Options{Root: f.root, Evidence: f.evidence})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range r.Failures {
		if x.Check == CheckStatement {
			t.Errorf("an honest statement of a failed run: %s", x.Message)
		}
	}
	p["passedTests"] = append(p["passedTests"].([]any), failedT[0])
	p["failedTests"] = []any{}
	p["result"] = "PASSED"
	f.writeJSON(t, "evidence/"+StatementFile, st)
	r, err = Audit(Options{Root: f.root, Evidence: f.evidence})
	if err != nil {
		t.Fatal(err)
	}
	want := "predicate.passedTests: lists " + failedT[0].(string) + ", which does not match its case file"
	if !slices.ContainsFunc(r.Failures, func(x Failure) bool { return strings.Contains(x.Message, want) }) {
		t.Errorf("failures = %v, want %q", r.Failures, want)
	}
}

// restamp keeps an existing statement in step with an evidence file just
// written (rel), so that a test forging one file tells one story.
func (f *fixture) restamp(t *testing.T, rel string) {
	t.Helper()
	if rel != "evidence/manifest.json" && rel != "evidence/results.json" { // what the statement depends on
		return
	}
	if _, err := os.Stat(f.path("evidence/" + StatementFile)); err != nil {
		return
	}
	f.stamp(t)
}

package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// StatementFile is the in-toto Statement v1 the runner writes beside
// manifest.json. The manifest does not list it (the statement lists the
// manifest).
const StatementFile = "statement.intoto.json"

// checkStatement checks statement.intoto.json: present (every runner since
// the statement writes one: a folder without it is older evidence, or
// stripped), valid against schema/statement.schema.json after a strict
// read; its subjects are exactly manifest.files plus manifest.json, each
// with the SHA-256 the manifest lists (the file checks tie those to the
// bytes) and manifest.json's with the SHA-256 of its bytes; its
// passedTests and failedTests are exactly the selected runs of
// results.json ("case/store") that the audit found matching, and not
// matching, their case files; result is PASSED iff no test failed; its
// configuration is source_commit (gitCommit) and every cases/ source of
// manifest.sources with its SHA-256, in path order.
func (a *auditor) checkStatement() {
	a.check()
	data, err := readInside(a.opts.Evidence, StatementFile, CapStatement)
	switch {
	case errors.Is(err, os.ErrNotExist):
		a.statementFail("", "%s: missing: the runner writes an in-toto Statement beside manifest.json (a folder without one comes from an older runner, or had it removed): write the evidence again with the current runner", StatementFile)
		return
	case err != nil:
		a.failf(CheckFile, "file %s: %v", StatementFile, unwrapPath(err))
		return
	}
	a.statement = data
	schema, err := loadSchema(a.opts.Root, "statement")
	if err != nil {
		a.statementFail("", "%s: cannot check: %v", StatementFile, err)
		return
	}
	v, err := decodeJSON(data, capStatementJSON)
	if err != nil {
		a.failf(CheckSchema, "%s: %s", StatementFile, jsonRefusal(err))
		return
	}
	lines := validate(schema, v)
	for _, l := range lines {
		a.failf(CheckSchema, "%s: %s", StatementFile, l)
	}
	if len(lines) > 0 {
		return
	}
	st := v.(map[string]any)
	a.statementSubjects(st)
	pred := mapOf(st, "predicate")
	a.statementTests(pred)
	a.statementConfiguration(pred)
	a.claim("statement")
}

func (a *auditor) statementFail(field, format string, args ...any) {
	a.fail(Failure{Check: CheckStatement, Field: field, Message: fmt.Sprintf(format, args...)})
}

// statementSubjects checks the subjects against the manifest.
func (a *auditor) statementSubjects(st map[string]any) {
	want := map[string]string{}
	for p, sum := range a.listed {
		want[p] = sum
	}
	if mb, err := readInside(a.opts.Evidence, "manifest.json", CapManifest); err == nil {
		sum := sha256.Sum256(mb)
		want["manifest.json"] = hex.EncodeToString(sum[:])
	}
	got := map[string]string{}
	subjects, _ := st["subject"].([]any)
	for i, s := range subjects {
		m, _ := s.(map[string]any)
		name, _ := str(m, "name")
		digest := mapOf(m, "digest")
		sum, ok := str(digest, "sha256")
		a.check()
		switch _, dup := got[name]; {
		case dup:
			a.statementFail("subject", "%s: subject[%d] %s: named twice", StatementFile, i, name)
			continue
		case !ok || len(digest) != 1:
			a.statementFail("subject", "%s: subject %s: digest: want exactly a sha256", StatementFile, name)
		}
		got[name] = sum
	}
	for _, name := range sortedKeys(want) {
		a.check()
		sum, ok := got[name]
		switch {
		case !ok:
			a.statementFail("subject", "%s: subject %s: missing (every evidence file and manifest.json is a subject)", StatementFile, name)
		case sum != want[name] && name == "manifest.json":
			a.statementFail("subject", "%s: subject manifest.json: sha256 %s, but manifest.json's bytes hash to %s", StatementFile, sum, want[name])
		case sum != want[name]:
			a.statementFail("subject", "%s: subject %s: sha256 %s, but manifest.files lists %s", StatementFile, name, sum, want[name])
		}
	}
	for _, name := range sortedKeys(got) {
		if _, ok := want[name]; !ok {
			a.statementFail("subject", "%s: subject %s: not a file manifest.files lists", StatementFile, name)
		}
	}
}

// statementTests checks passedTests, failedTests and result against the
// runs the audit checked: a run "matches" when its expectation check found
// nothing (results.json against the case file).
func (a *auditor) statementTests(pred map[string]any) {
	var runs []any
	if data, ok := a.evidenceFile("results.json"); ok {
		v, err := decodeJSON(data, capResultsJSON)
		if err != nil {
			return // reported by the schema checks
		}
		doc, _ := v.(map[string]any)
		runs, _ = doc["runs"].([]any)
	} else if len(a.selCases) > 0 && len(a.selStores) > 0 {
		a.note(StatementFile + ": its tests were not compared: results.json is missing or unreadable")
		return
	}
	names := func(cs []*Case) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	cases, stores := names(a.cases), a.stores
	if a.opts.Case != "" || a.opts.Store != "" {
		a.note(StatementFile + ": only the tests of the runs checked in depth (-case, -store) were compared")
	}
	failedRun := map[string]bool{}
	for _, f := range a.report.Failures {
		if f.Check == CheckExpectation {
			failedRun[f.Case+"/"+f.Store] = true
		}
	}
	var wantPassed, wantFailed []string
	seen := map[string]bool{}
	for _, r := range runs {
		m, _ := r.(map[string]any)
		c, _ := str(m, "case")
		s, _ := str(m, "store")
		name := c + "/" + s
		if !slices.Contains(cases, c) || !slices.Contains(stores, s) || seen[name] {
			continue
		}
		seen[name] = true
		if failedRun[name] {
			wantFailed = append(wantFailed, name)
		} else {
			wantPassed = append(wantPassed, name)
		}
	}
	inScope := func(name string) bool {
		c, s, _ := strings.Cut(name, "/")
		return a.opts.Case == "" && a.opts.Store == "" || slices.Contains(cases, c) && slices.Contains(stores, s)
	}
	for _, list := range []struct {
		field string
		want  []string
		other []string
	}{{"passedTests", wantPassed, wantFailed}, {"failedTests", wantFailed, wantPassed}} {
		got := slices.DeleteFunc(stringList(pred, list.field), func(n string) bool { return !inScope(n) })
		a.check()
		for _, n := range got {
			switch {
			case slices.Contains(list.want, n):
			case slices.Contains(list.other, n) && list.field == "passedTests":
				a.statementFail("predicate."+list.field, "%s: predicate.passedTests: lists %s, which does not match its case file (the audit's verdict: failed)", StatementFile, n)
			case slices.Contains(list.other, n):
				a.statementFail("predicate."+list.field, "%s: predicate.failedTests: lists %s, which matches its case file (the audit's verdict: passed)", StatementFile, n)
			default:
				a.statementFail("predicate."+list.field, "%s: predicate.%s: lists %s, which is not a selected run of results.json", StatementFile, list.field, n)
			}
		}
		for _, n := range list.want {
			if !slices.Contains(got, n) && !slices.Contains(stringList(pred, map[string]string{"passedTests": "failedTests", "failedTests": "passedTests"}[list.field]), n) {
				a.statementFail("predicate."+list.field, "%s: predicate.%s: lacks %s (the audit's verdict on that run)", StatementFile, list.field, n)
			}
		}
		if d := duplicates(got); d != "" {
			a.statementFail("predicate."+list.field, "%s: predicate.%s: lists %s twice", StatementFile, list.field, d)
		}
	}
	a.check()
	want := "PASSED"
	if len(stringList(pred, "failedTests")) > 0 {
		want = "FAILED"
	}
	if got, _ := str(pred, "result"); got != want {
		a.statementFail("predicate.result", "%s: predicate.result: expected %s (%d failed tests), observed %s", StatementFile, want, len(stringList(pred, "failedTests")), got)
	}
}

func duplicates(xs []string) string {
	seen := map[string]bool{}
	for _, x := range xs {
		if seen[x] {
			return x
		}
		seen[x] = true
	}
	return ""
}

// statementConfiguration checks the configuration against the manifest.
func (a *auditor) statementConfiguration(pred map[string]any) {
	commit, _ := str(a.manifest, "source_commit")
	want := []any{map[string]any{"name": "source_commit", "digest": map[string]any{"gitCommit": commit}}}
	sources := stringMap(a.manifest, "sources")
	for _, p := range sortedKeys(sources) {
		if strings.HasPrefix(p, "cases/") {
			want = append(want, map[string]any{"name": p, "digest": map[string]any{"sha256": sources[p]}})
		}
	}
	got, _ := pred["configuration"].([]any)
	a.check()
	for i := 0; i < max(len(want), len(got)); i++ {
		switch {
		case i >= len(got):
			a.statementFail("predicate.configuration", "%s: predicate.configuration: lacks %s (manifest.json: %s)", StatementFile, render(want[i]), describeConfig(want[i]))
		case i >= len(want):
			a.statementFail("predicate.configuration", "%s: predicate.configuration[%d]: %s: not the source commit or a case file of manifest.sources", StatementFile, i, render(got[i]))
		case render(got[i]) != render(want[i]):
			a.statementFail("predicate.configuration", "%s: predicate.configuration[%d]: expected %s (manifest.json), observed %s", StatementFile, i, render(want[i]), render(got[i]))
		default:
			continue
		}
		return // the first difference only: the rest would shift
	}
}

func describeConfig(v any) string {
	m, _ := v.(map[string]any)
	n, _ := str(m, "name")
	if n == "source_commit" {
		return "source_commit"
	}
	return "manifest.sources " + n
}

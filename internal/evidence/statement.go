package evidence

import (
	"fmt"
	"slices"
	"strings"
)

// StatementName is the in-toto Statement written beside the manifest. The
// manifest does not list it (it lists the manifest): the audit checks that
// it agrees with the manifest and the results.
const StatementName = "statement.intoto.json"

// In-toto type URIs: the Statement layer and the test-result predicate.
const (
	StatementType     = "https://in-toto.io/Statement/v1"
	TestResultType    = "https://in-toto.io/attestation/test-result/v0.1"
	testResultPassed  = "PASSED"
	testResultFailed  = "FAILED"
	sourceCommitName  = "source_commit"
	caseSourcePrefix  = "cases/"
	gitCommitAlgoName = "gitCommit"
)

// Tests is what a run tested, by name ("case/store"): the runs that matched
// their case file by the runner's own check, and those that did not.
type Tests struct {
	Passed []string
	Failed []string
}

// TestsOf lists the grid's runs as passed and failed tests.
func TestsOf(g *Grid) Tests {
	t := Tests{Passed: []string{}, Failed: []string{}}
	for _, r := range g.Runs() {
		name := r.Case.Name + "/" + string(r.Store)
		if r.Matches() {
			t.Passed = append(t.Passed, name)
		} else {
			t.Failed = append(t.Failed, name)
		}
	}
	return t
}

// statement is an in-toto Statement v1 with a test-result predicate.
type statement struct {
	Type          string       `json:"_type"`
	Subject       []descriptor `json:"subject"`
	PredicateType string       `json:"predicateType"`
	Predicate     testResult   `json:"predicate"`
}

// descriptor is an in-toto ResourceDescriptor: a name and its digests.
type descriptor struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// testResult is the test-result predicate v0.1.
type testResult struct {
	Result        string       `json:"result"`
	Configuration []descriptor `json:"configuration"`
	PassedTests   []string     `json:"passedTests"`
	WarnedTests   []string     `json:"warnedTests"`
	FailedTests   []string     `json:"failedTests"`
}

// Statement renders the in-toto Statement of evidence whose manifest is m
// (files filled in) with bytes manifest: its subjects are every evidence
// file and the manifest, each with its SHA-256; its predicate says which
// (case, store) runs passed and failed, and was configured by the source
// commit and the case files' digests (from the manifest's sources). It is
// not signed: it proves nothing about who made it, only what the files
// were, in a format other tools read.
func Statement(m Manifest, manifest []byte, t Tests) ([]byte, error) {
	st := statement{Type: StatementType, PredicateType: TestResultType}
	names := make([]string, 0, len(m.Files)+1)
	for name := range m.Files {
		names = append(names, name)
	}
	names = append(names, ManifestName)
	slices.Sort(names)
	for _, name := range names {
		sum := m.Files[name]
		if name == ManifestName {
			sum = SHA256(manifest)
		}
		st.Subject = append(st.Subject, descriptor{Name: name, Digest: map[string]string{"sha256": sum}})
	}
	res := testResult{Result: testResultPassed, PassedTests: t.Passed, WarnedTests: []string{}, FailedTests: t.Failed}
	if len(t.Failed) > 0 {
		res.Result = testResultFailed
	}
	if res.PassedTests == nil {
		res.PassedTests = []string{}
	}
	if res.FailedTests == nil {
		res.FailedTests = []string{}
	}
	res.Configuration = []descriptor{{Name: sourceCommitName, Digest: map[string]string{gitCommitAlgoName: m.SourceCommit}}}
	var cases []string
	for src := range m.Sources {
		if strings.HasPrefix(src, caseSourcePrefix) {
			cases = append(cases, src)
		}
	}
	slices.Sort(cases)
	for _, src := range cases {
		res.Configuration = append(res.Configuration, descriptor{Name: src, Digest: map[string]string{"sha256": m.Sources[src]}})
	}
	st.Predicate = res
	b, err := Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", StatementName, err)
	}
	return b, nil
}

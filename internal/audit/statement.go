package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"idemlab/internal/audit/dsse"
	"strings"
)

// StatementFile is the in-toto Statement of the evidence: every file with
// its SHA-256, and a test-result predicate naming the runs on stores that
// match their case files and those that do not, configured by the source
// commit and the case files; audit -write -sign also signs it (dsse.go).
const StatementFile = "statement.intoto.json"

// In-toto type URIs: the Statement layer and the test-result predicate.
const (
	statementType  = "https://in-toto.io/Statement/v1"
	testResultType = "https://in-toto.io/attestation/test-result/v0.1"
)

type statementDoc struct {
	Type          string         `json:"_type"`
	Subject       []descriptor   `json:"subject"`
	PredicateType string         `json:"predicateType"`
	Predicate     testResultPred `json:"predicate"`
}

// descriptor is an in-toto ResourceDescriptor: a name and its digests.
type descriptor struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// testResultPred is the test-result predicate v0.1.
type testResultPred struct {
	Result        string       `json:"result"`
	Configuration []descriptor `json:"configuration"`
	PassedTests   []string     `json:"passedTests"`
	WarnedTests   []string     `json:"warnedTests"`
	FailedTests   []string     `json:"failedTests"`
}

// deriveStatement writes statement.intoto.json, last of the derived files
// (it lists them), and with -write -sign its signed envelope.
func (a *auditor) deriveStatement() {
	mb, err := readInside(a.opts.Evidence, "manifest.json", CapManifest)
	if err != nil {
		return // the audit read it first: it cannot have gone unless removed meanwhile
	}
	sums := map[string]string{"manifest.json": sha256Hex(mb)}
	for p, sum := range a.listed {
		sums[p] = sum
	}
	for p, sum := range a.derived {
		sums[p] = sum
	}
	st := statementDoc{Type: statementType, PredicateType: testResultType}
	for _, name := range sortedKeys(sums) {
		st.Subject = append(st.Subject, descriptor{Name: name, Digest: map[string]string{"sha256": sums[name]}})
	}
	pred := testResultPred{Result: "PASSED", PassedTests: []string{}, WarnedTests: []string{}, FailedTests: []string{}}
	for _, v := range a.storeVerdicts {
		if v.Matches {
			pred.PassedTests = append(pred.PassedTests, v.Case+"/"+v.Store)
		} else {
			pred.FailedTests = append(pred.FailedTests, v.Case+"/"+v.Store)
			pred.Result = "FAILED"
		}
	}
	commit, _ := str(a.manifest, "source_commit")
	pred.Configuration = []descriptor{{Name: "source_commit", Digest: map[string]string{"gitCommit": commit}}}
	sources := stringMap(a.manifest, "sources")
	for _, p := range sortedKeys(sources) {
		if strings.HasPrefix(p, "cases/") {
			pred.Configuration = append(pred.Configuration, descriptor{Name: p, Digest: map[string]string{"sha256": sources[p]}})
		}
	}
	st.Predicate = pred
	data, err := marshalEvidence(st)
	if err != nil {
		a.failf(CheckDerived, "%s: cannot encode: %v", StatementFile, err)
		return
	}
	a.claim("statement")
	a.emit(StatementFile, data)
	a.statement = data
	if a.signKey != nil {
		a.emit(EnvelopeFile, dsse.Sign(a.signKey, data))
	}
}

// sha256Hex is the hex SHA-256 of b.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"idemlab/internal/audit/dsse"
)

// This file is the audit's output: the files it derives from the
// observations, written with -write (the runner runs it so after every
// run), else required in the folder byte for byte.

// derivedFiles are the names of the files the audit writes for some
// selection (the chaos timelines aside: chaos-NAME.svg, one per history).
var derivedFiles = []string{ReportFile, TargetsReportFile, MatrixFile, MatrixSVGFile, VerdictsFile, JitterSVGFile, StatementFile, EnvelopeFile}

// ReportFile is REPORT.md, the tables of the runs on stores.
const ReportFile = "REPORT.md"

// isDerived reports whether name is a file the audit derives for some
// selection (never listed in manifest.files, the runner's observations).
func isDerived(name string) bool {
	_, ext, ok := subjectOf(name)
	return slices.Contains(derivedFiles, name) || ok && ext == "svg"
}

// emit hands over a derived file: written with -write, else compared
// with the folder's; its SHA-256 goes into the statement either way.
func (a *auditor) emit(name string, data []byte) {
	a.derived[name] = sha256Hex(data)
	a.check()
	if a.opts.Write {
		if err := writeAtomic(filepath.Join(a.opts.Evidence, name), data); err != nil {
			a.writeErr = errors.Join(a.writeErr, err)
		}
		return
	}
	f, err := openInside(a.opts.Evidence, name, max(capOf(name), int64(len(data))+1))
	switch {
	case errors.Is(err, os.ErrNotExist):
		a.fail(Failure{Check: CheckDerived, Field: name,
			Message: fmt.Sprintf("%s: missing: the audit derives it from the observations (audit -write writes it)", name)})
		return
	case err != nil:
		a.failf(CheckFile, "file %s: %v", name, unwrapPath(err))
		return
	}
	defer f.Close()
	if at, _, same := sameStream(data, io.LimitReader(f, int64(len(data))+1)); !same {
		a.fail(Failure{Check: CheckDerived, Field: name,
			Message: fmt.Sprintf("%s: differs from the audit's own rendering: %s", name, describeDiff(data, at, f))})
	}
}

// describeDiff names the line of the file f where it first differs from
// want (at byte at), and that whole line on each side.
func describeDiff(want []byte, at int64, f io.ReaderAt) string {
	start := bytes.LastIndexByte(want[:min(int64(len(want)), at)], '\n') + 1
	got := make([]byte, 121) // enough to tell a line clip shortens
	n, _ := f.ReadAt(got, int64(start))
	return fmt.Sprintf("line %d: expected %s, observed %s", bytes.Count(want[:start], []byte("\n"))+1,
		lineText(want[start:]), lineText(got[:n]))
}

// lineText quotes the first line of b, clipped; "the end of the file" when
// b is empty.
func lineText(b []byte) string {
	if len(b) == 0 {
		return "the end of the file"
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	return strconv.Quote(clip(b))
}

// writeAtomic writes a temp file beside path, fsyncs it and renames it
// over path, so a reader sees the old bytes or the new, never a mix.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

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

// deriveStatement writes the statement, last of the derived files (it
// lists them), and with -sign its signed envelope.
func (a *auditor) deriveStatement() {
	if !a.slice.Whole() {
		return // a slice is judged once merged
	}
	mb, err := readInside(a.opts.Evidence, "manifest.json", CapManifest)
	if err != nil {
		return // the audit read it first: it cannot have gone unless removed meanwhile
	}
	sums := map[string]string{"manifest.json": sha256Hex(mb)}
	maps.Copy(sums, a.listed)
	maps.Copy(sums, a.derived)
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

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

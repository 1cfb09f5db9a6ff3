package audit

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// Ensure the statement the audit derives names every evidence file (the
// runner's, the manifest and the audit's own renderings) with its SHA-256,
// says which runs matched their case files and which did not, and that a
// statement edited after the audit wrote it fails, naming the line.
func TestStatement(t *testing.T) {
	f := newFixture(t)
	f.editJSON(t, "evidence/results.json", func(doc map[string]any) {
		run(doc, 0)["counter"] = json.Number("99")
	})
	f.rehash(t)
	var st struct {
		Subject []struct {
			Name   string            `json:"name"`
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
		Predicate struct {
			Result      string   `json:"result"`
			PassedTests []string `json:"passedTests"`
			FailedTests []string `json:"failedTests"`
		} `json:"predicate"`
	}
	data, err := os.ReadFile(f.path("evidence/" + StatementFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range st.Subject {
		names = append(names, s.Name)
		if want := sha256Hex(mustRead(t, f.path("evidence/"+s.Name))); s.Digest["sha256"] != want {
			t.Errorf("subject %s: sha256 %s, want its bytes' %s", s.Name, s.Digest["sha256"], want)
		}
	}
	for _, want := range []string{"manifest.json", "results.json", "run.json", ReportFile, VerdictsFile} {
		if !slices.Contains(names, want) {
			t.Errorf("subjects %v lack %s", names, want)
		}
	}
	if p := st.Predicate; p.Result != "FAILED" || len(p.FailedTests) != 1 || !strings.HasSuffix(p.FailedTests[0], "/volatile") || len(p.PassedTests) == 0 {
		t.Errorf("predicate %+v, want FAILED with the forged run alone failed", p)
	}

	forged := strings.Replace(string(data), `"result": "FAILED"`, `"result": "PASSED"`, 1)
	f.write(t, "evidence/"+StatementFile, forged)
	r, err := Audit(Options{Root: f.root, Evidence: f.evidence, AllowDirty: true})
	if err != nil {
		t.Fatal(err)
	}
	want := StatementFile + ": differs from the audit's own rendering: line "
	if !slices.ContainsFunc(r.Failures, func(x Failure) bool { return x.Check == CheckDerived && strings.Contains(x.Message, want) }) {
		t.Errorf("failures = %v, want one containing %q", r.Failures, want)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

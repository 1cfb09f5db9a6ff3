package evidence

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"idemlab/internal/casefile"
	"idemlab/internal/protocol"
	"idemlab/internal/results"
	"idemlab/internal/schemacheck"
	"idemlab/internal/target"
)

// specReport holds the REPORT.md part of the specification corpus: case
// files, results.json files and the REPORT.md each must render to, which
// the audit's own renderer (internal/audit/report.go) must give too; see
// testdata/spec/README.md.
const specReport = "../../testdata/spec/report"

var updateSpec = flag.Bool("update-spec", false, "rewrite "+specReport+"/{,mismatch/}REPORT.md and "+specTargets+"/TARGETS.md from these renderers (review the diff: the audit's tests then say whether they agree)")

// specGrid builds the grid the runner would have built from the corpus
// case files and the results.json in dir: the cases in file order, the
// stores in the order results.json first names them, each run checked
// against its case as the runner checks it.
func specGrid(t *testing.T, cases []casefile.Case, set *schemacheck.Set, dir string) *Grid {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ResultsName))
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Validate("results.schema.json", data); err != nil {
		t.Fatalf("%s/%s: %v", dir, ResultsName, err)
	}
	var doc resultsDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s/%s: %v", dir, ResultsName, err)
	}
	if again, err := Marshal(doc); err != nil || !bytes.Equal(again, data) {
		t.Errorf("%s/%s is not byte for byte what the runner writes of it (err %v)", dir, ResultsName, err)
	}
	var stores []protocol.Store
	for _, r := range doc.Runs {
		if !slices.Contains(stores, r.Store) {
			stores = append(stores, r.Store)
		}
	}
	if got, want := len(doc.Runs), len(cases)*len(stores); got != want {
		t.Fatalf("%s/%s: %d runs, want %d (%d cases × %d stores)", dir, ResultsName, got, want, len(cases), len(stores))
	}
	g := NewGrid(cases, stores)
	for _, obs := range doc.Runs {
		i := slices.IndexFunc(cases, func(c casefile.Case) bool { return c.Name == obs.Case })
		j := slices.Index(stores, obs.Store)
		if i < 0 || g.At(i, j).Obs.Case != "" {
			t.Fatalf("%s/%s: run of case %q on %s: no such case, or a second run", dir, ResultsName, obs.Case, obs.Store)
		}
		r := Run{Case: cases[i], Store: obs.Store, Obs: obs}
		if x, ok := cases[i].Expect[obs.Store]; ok {
			r.Mismatches = x.Mismatches(obs)
		} else {
			r.Mismatches = []string{"no expectation for this store in " + cases[i].File}
		}
		g.Set(i, j, r)
	}
	return g
}

// Ensure Report renders every corpus results.json (all runs matching; two
// runs that do not) to the corpus REPORT.md beside it, byte for byte.
func TestSpecReport(t *testing.T) {
	set, err := schemacheck.Load("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	cases, err := casefile.LoadDir(filepath.Join(specReport, "cases"), set)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir            string
		wantMismatches int
	}{
		{specReport, 0},
		{filepath.Join(specReport, "mismatch"), 2},
	} {
		t.Run(filepath.Base(tt.dir), func(t *testing.T) {
			g := specGrid(t, cases, set, tt.dir)
			if got := len(g.Runs()) - g.Matching(); got != tt.wantMismatches {
				t.Errorf("%s: %d runs do not match their case, want %d", tt.dir, got, tt.wantMismatches)
			}
			got := Report(g)
			path := filepath.Join(tt.dir, ReportName)
			if *updateSpec {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Report() differs from %s:\n%s", path, lineDiff(want, got))
			}
		})
	}
}

// lineDiff shows the first line where got differs from want.
func lineDiff(want, got []byte) string {
	i := 0
	for i < min(len(want), len(got)) && want[i] == got[i] {
		i++
	}
	start := bytes.LastIndexByte(want[:i], '\n') + 1
	line := func(b []byte) string {
		rest := b[start:]
		if end := bytes.IndexByte(rest, '\n'); end >= 0 {
			rest = rest[:end]
		}
		return string(rest)
	}
	return fmt.Sprintf("line %d:\n want %q\n got  %q", 1+bytes.Count(want[:start], []byte("\n")), line(want), line(got))
}

// specTargets holds the targets part of the corpus: case files, runs on
// targets with their verdicts (targets.json), and the TARGETS.md they must
// render to, which the audit's own renderer (internal/audit/targetsreport.go)
// must give too.
const specTargets = "../../testdata/spec/targets"

// Ensure TargetsReport renders the corpus's targets.json to the corpus
// TARGETS.md, byte for byte.
func TestSpecTargets(t *testing.T) {
	set, err := schemacheck.Load("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	cases, err := casefile.LoadDir(filepath.Join(specTargets, "cases"), set)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(specTargets, TargetsName))
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Validate("targets.schema.json", data); err != nil {
		t.Fatalf("%s: %v", TargetsName, err)
	}
	var doc struct {
		Targets []struct {
			targetDoc
			Runs []struct {
				targetRunDoc
				Detail any `json:"detail"`
			} `json:"runs"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var ts []TargetResult
	for _, d := range doc.Targets {
		tg, err := target.Parse(d.Name+"/target.json", []byte(d.TargetJSON), set)
		if err != nil {
			t.Fatal(err)
		}
		tr := TargetResult{Target: tg, TargetJSON: []byte(d.TargetJSON), Dir: d.Dir, Digest: d.Digest, Libraries: d.Libraries, Runtime: d.Runtime, Skipped: d.Skipped}
		for _, r := range d.Runs {
			i := slices.IndexFunc(cases, func(c casefile.Case) bool { return c.Name == r.Case })
			if i < 0 {
				t.Fatalf("target %s: run of case %q: no such case file", d.Name, r.Case)
			}
			run := TargetRun{Case: cases[i], NotRun: r.NotRun, Mirror: r.Mirror}
			if r.NotRun == "" {
				run.Obs = results.Run{Case: r.Case, Counter: *r.Counter, ExitCodes: r.ExitCodes, Calls: r.Calls}
				run.Verdict = *r.Verdict
			}
			tr.Runs = append(tr.Runs, run)
		}
		ts = append(ts, tr)
	}
	got := TargetsReport(ts)
	path := filepath.Join(specTargets, TargetsReportName)
	if *updateSpec {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("TargetsReport() differs from %s:\n%s", path, lineDiff(want, got))
	}
}

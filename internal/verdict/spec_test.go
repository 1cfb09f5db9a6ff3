package verdict

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"idemlab/internal/casefile"
	"idemlab/internal/results"
	"idemlab/internal/schemacheck"
	"idemlab/internal/target"
)

// specTargets is the targets part of the specification corpus: case files,
// runs on targets with the verdict each must get, and the native runs a
// mirroring target is compared with, which the audit's own judge
// (internal/audit/targetjudge.go) must give too; see testdata/spec/README.md.
const specTargets = "../../testdata/spec/targets"

// SpecRun is one run of the corpus's targets.json, as the verdict sees it.
type specRun struct {
	Case      string         `json:"case"`
	NotRun    string         `json:"not_run"`
	Counter   *int64         `json:"counter"`
	ExitCodes []int          `json:"exit_codes"`
	Calls     []results.Call `json:"calls"`
	Verdict   *Verdict       `json:"verdict"`
	Mirror    []string       `json:"mirror"`
}

// Ensure NotRun, Judge and Mirror give every run of the corpus exactly the
// not_run, verdict and mirror list recorded beside it.
func TestSpecTargets(t *testing.T) {
	set, err := schemacheck.Load(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := casefile.LoadDir(filepath.Join(specTargets, "cases"), set)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]casefile.Case{}
	for _, c := range cases {
		byName[c.Name] = c
	}
	data, err := os.ReadFile(filepath.Join(specTargets, "targets.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Validate("targets.schema.json", data); err != nil {
		t.Fatalf("targets.json: %v", err)
	}
	var doc struct {
		Targets []struct {
			Name       string    `json:"name"`
			TargetJSON string    `json:"target_json"`
			Skipped    string    `json:"skipped"`
			Runs       []specRun `json:"runs"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	native := map[string]results.Run{} // the volatile runs a mirroring target is compared with
	nd, err := os.ReadFile(filepath.Join(specTargets, "native.json"))
	if err != nil {
		t.Fatal(err)
	}
	var nat struct{ Runs []results.Run }
	if err := json.Unmarshal(nd, &nat); err != nil {
		t.Fatal(err)
	}
	for _, r := range nat.Runs {
		native[string(r.Store)+"/"+r.Case] = r
	}

	judged, notRun := 0, 0
	for _, tt := range doc.Targets {
		tg, err := target.Parse(tt.Name+"/target.json", []byte(tt.TargetJSON), set)
		if err != nil {
			t.Fatal(err)
		}
		if tt.Skipped != "" && len(tt.Runs) > 0 {
			t.Errorf("target %s: skipped, with %d runs", tt.Name, len(tt.Runs))
		}
		for _, r := range tt.Runs {
			c, ok := byName[r.Case]
			if !ok {
				t.Fatalf("target %s: run of case %q: no such case file", tt.Name, r.Case)
			}
			if got := NotRun(c, tg); got != r.NotRun {
				t.Errorf("target %s, case %s: NotRun = %q, want %q", tt.Name, r.Case, got, r.NotRun)
			}
			if r.NotRun != "" {
				notRun++
				continue
			}
			obs := results.Run{Case: c.Name, Counter: *r.Counter, ExitCodes: r.ExitCodes, Calls: r.Calls}
			v, err := Judge(c, For(tg), obs)
			if err != nil {
				t.Fatalf("target %s, case %s: %v", tt.Name, r.Case, err)
			}
			judged++
			if got, want := canonical(t, v), canonical(t, r.Verdict); !reflect.DeepEqual(got, want) {
				t.Errorf("target %s, case %s: Judge =\n%s\nwant\n%s", tt.Name, r.Case, got, want)
			}
			var mirror []string
			if n, ok := native[tg.Mirrors+"/"+c.Name]; ok {
				mirror = Mirror(n, obs)
			}
			if !reflect.DeepEqual(mirror, r.Mirror) {
				t.Errorf("target %s, case %s: Mirror = %q, want %q", tt.Name, r.Case, mirror, r.Mirror)
			}
		}
	}
	if judged < 20 || notRun < 8 {
		t.Errorf("%d runs judged and %d not run, want the corpus (at least 20 and 8)", judged, notRun)
	}
}

// canonical is v's JSON, indented, for a comparison that ignores how the
// corpus spells it.
func canonical(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatal(err)
	}
	out, _ := json.MarshalIndent(x, "", "  ")
	return string(bytes.TrimSpace(out))
}

package chaos

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// specDir holds the chaos histories of the specification corpus that this
// checker and the audit's own (internal/audit/chaos.go) must judge alike;
// see testdata/spec/README.md.
const specDir = "../../testdata/spec/chaos"

var updateSpec = flag.Bool("update-spec", false, "rewrite every "+specDir+"/*.findings.json from this checker (review the diff: the audit's test then says whether it agrees)")

// specFindings is the content of a findings file: what the checker derives
// from a history, everything of chaos.json a history alone decides.
type specFindings struct {
	Counts   map[string]any `json:"counts"`
	Verdict  specVerdict    `json:"verdict"`
	Findings []specFinding  `json:"findings"`
}

type specVerdict struct {
	OK         bool          `json:"ok"`
	Violations int           `json:"violations"`
	Shown      int           `json:"shown"`
	Rules      []RuleVerdict `json:"rules"`
}

type specFinding struct {
	Rule   Rule   `json:"rule"`
	Intent int    `json:"intent"`
	Key    string `json:"key"`
}

// notFromHistory are the counts chaos.json holds that the lab measures
// while running rather than derives from the history.
var notFromHistory = []string{"unresolved_after_chaos", "chaos_ms", "quiet_ms"}

// specCheck is the checker's findings file for h.
func specCheck(t *testing.T, h History) specFindings {
	t.Helper()
	c := CheckHistory(h)
	var n Counts
	n.Intents, n.Acked, n.AppliedOnce, n.Duplicates, n.NotApplied, n.LostAcks, n.Stuck =
		c.Intents, c.Acked, c.AppliedOnce, c.Duplicates, c.NotApplied, c.LostAcks, c.Stuck
	countHistory(&n, h)
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	out := specFindings{Findings: []specFinding{}}
	if err := json.Unmarshal(data, &out.Counts); err != nil {
		t.Fatal(err)
	}
	for _, k := range notFromHistory {
		delete(out.Counts, k)
	}
	v := NewVerdict(h.Store, c)
	out.Verdict = specVerdict{v.OK, v.Violations, v.Shown, v.Rules}
	for _, f := range c.Findings {
		out.Findings = append(out.Findings, specFinding{f.Rule, f.Intent, f.Key})
	}
	return out
}

// canonical decodes JSON into plain values, numbers as json.Number.
func canonical(t *testing.T, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Ensure the lab's checker gives every corpus history exactly the findings
// file beside it (counts, verdict, findings by rule and intent), and that
// each history is byte for byte what History.Write writes of it.
func TestSpecHistories(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(specDir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 10 {
		t.Fatalf("%d histories in %s, want the corpus (at least 10)", len(paths), specDir)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".jsonl")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			h, err := ReadHistory(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("ReadHistory(%s) error = %v", p, err)
			}
			var b bytes.Buffer
			if err := h.Write(&b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), data) {
				t.Errorf("%s is not in the lab's format: Write(ReadHistory(file)) differs from the file", p)
			}
			got, err := json.MarshalIndent(specCheck(t, h), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			fp := filepath.Join(specDir, name+".findings.json")
			if *updateSpec {
				if err := os.WriteFile(fp, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(fp)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(canonical(t, got), canonical(t, want)) {
				t.Errorf("CheckHistory(%s) gives\n%s\nwant (%s)\n%s", p, got, fp, want)
			}
		})
	}
}

package audit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Ensure Compare says identical for equal bytes and names the runs that
// differ or exist in only one folder.
func TestCompare(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(t *testing.T, f *fixture)
		identical bool
		want      []string
	}{
		{name: "identical", mutate: func(t *testing.T, f *fixture) {}, identical: true, want: []string{"identical: results.json", "identical: REPORT.md"}},
		{
			name: "forged counter and a dropped run",
			mutate: func(t *testing.T, f *fixture) {
				f.editJSON(t, "evidence/results.json", func(d map[string]any) {
					runOf(d, "keyed_lost_reply")["counter"] = 5
					runs := d["runs"].([]any)
					d["runs"] = runs[:len(runs)-1]
				})
				f.derive(t) // as the runner's audit -write leaves it: no REPORT.md for a run set lacking a run
			},
			want: []string{
				"differs: results.json",
				"results.json: case keyed_lost_reply, store volatile: run differs",
				"results.json: case capacity_and_input, store volatile: only in A",
				"differs: REPORT.md (only in A)",
				"differs as expected (timings, histories, the targets' own timing; not compared byte for byte): statement.intoto.json, verdicts.json",
			},
		},
		{
			name: "formatting only",
			mutate: func(t *testing.T, f *fixture) {
				data, _ := os.ReadFile(f.path("evidence/results.json"))
				os.WriteFile(f.path("evidence/results.json"), append(data, '\n'), 0o644)
			},
			want: []string{"differs: results.json", "results.json: the runs are equal; only the bytes' formatting differs", "identical: REPORT.md"},
		},
		{
			name: "other files may differ",
			mutate: func(t *testing.T, f *fixture) {
				f.write(t, "evidence/run.json", "{}")
			},
			identical: true,
			want:      []string{"identical: results.json", "identical: REPORT.md", "differs as expected (timings, histories, the targets' own timing; not compared byte for byte): run.json"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			a := filepath.Join(f.root, "A")
			if err := os.CopyFS(a, os.DirFS(f.evidence)); err != nil {
				t.Fatal(err)
			}
			tt.mutate(t, f)
			t.Chdir(f.root)
			c, err := Compare("A", "evidence")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Lines; !slices.Equal(got, tt.want) {
				t.Errorf("Compare() lines =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if got, want := c.Identical, tt.identical; got != want {
				t.Errorf("Compare().Identical = %v, want %v", got, want)
			}
		})
	}
}

// Ensure a folder or a required file that cannot be read is an error.
func TestCompareCannotRead(t *testing.T) {
	f := newFixture(t)
	t.Chdir(f.root)
	if _, err := Compare("evidence", "nope"); err == nil || err.Error() != "evidence folder nope: no such file or directory" {
		t.Errorf("Compare(missing folder) error = %v", err)
	}
	os.Mkdir("empty", 0o755)
	if _, err := Compare("evidence", "empty"); err == nil || err.Error() != "empty/results.json: no such file or directory" {
		t.Errorf("Compare(no results.json) error = %v", err)
	}
}

// Ensure Compare sets the rates of the cases on targets side by side:
// every case agrees when the folders are equal, a case whose trials in
// one folder fall outside the other's interval is named with both rates
// and does not make the folders differ, and a case run in one folder
// alone is counted.
func TestCompareTargetRates(t *testing.T) {
	f := newTargetFixture(t)
	f.write(t, "evidence/results.json", "{}\n") // a folder of targets alone has none; Compare needs one
	a := filepath.Join(f.root, "A")
	if err := os.CopyFS(a, os.DirFS(f.evidence)); err != nil {
		t.Fatal(err)
	}
	t.Chdir(f.root)
	rates := func() []string {
		t.Helper()
		c, err := Compare("A", "evidence")
		if err != nil {
			t.Fatal(err)
		}
		if !c.Identical {
			t.Errorf("Compare().Identical = false, want true: rates on targets never make the folders differ\n%s", strings.Join(c.Lines, "\n"))
		}
		var got []string
		for _, l := range c.Lines {
			if strings.HasPrefix(l, "target rates: ") {
				got = append(got, l)
			}
		}
		return got
	}
	want := []string{"target rates: 29 cases on targets ran in both (each in 1 trial in A, 1 trial in evidence): 29 agree (every safety verdict's and rule's Wilson 99 % intervals overlap)"}
	if got := rates(); !slices.Equal(got, want) {
		t.Errorf("equal folders: lines =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	f.editJSON(t, "evidence/verdicts.json", func(d map[string]any) {
		runs := d["targets"].([]any)[0].(map[string]any)["runs"].([]any)
		kept := runs[1].(map[string]any) // express-idempotency keyed_lost_reply: pass in 1 of 1
		kept["trials"], kept["tally"] = 50, map[string]any{"pass": 0, "limitation": 0, "violation": 50}
		kept["rates"] = []any{map[string]any{"rule": "duplicate_effect", "trials": 50}}
		d["targets"].([]any)[0].(map[string]any)["runs"] = runs[1:]
	})
	want = []string{
		"target rates: 28 cases on targets ran in both (each in 1 trial in A, 1 to 50 trials in evidence): 27 agree (every safety verdict's and rule's Wilson 99 % intervals overlap), 1 do not (a target's races are its own: not a difference of the folders); 1 ran in only one folder",
		"target rates: target express-idempotency, case keyed_lost_reply: pass in 1/1 trials of A (Wilson 99 %: 13.1–100 %), in 0/50 of evidence (0–11.7 %)",
		"target rates: target express-idempotency, case keyed_lost_reply: violation in 0/1 trials of A (Wilson 99 %: 0–86.9 %), in 50/50 of evidence (88.3–100 %)",
		"target rates: target express-idempotency, case keyed_lost_reply: rule duplicate_effect in 0/1 trials of A (Wilson 99 %: 0–86.9 %), in 50/50 of evidence (88.3–100 %)",
	}
	if got := rates(); !slices.Equal(got, want) {
		t.Errorf("forged rates: lines =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

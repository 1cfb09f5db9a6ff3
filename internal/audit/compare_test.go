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

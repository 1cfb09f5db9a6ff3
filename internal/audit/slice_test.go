package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"idemlab/internal/audit/shard"
)

// sliceOf writes slice s of fixture f's run into a fixture of its own, as
// runner -shard would have: manifest.shard set, results.json and run.json
// holding the runs on stores s holds, targets.json per target the records
// of the cases with a trial in s, each its trials in s (the first in the
// record, the rest its further trials), rehashed, nothing derived.
func (f *fixture) sliceOf(t *testing.T, s shard.Slice, rehash func(*fixture, *testing.T)) *fixture {
	t.Helper()
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(f.root)); err != nil {
		t.Fatal(err)
	}
	g := &fixture{root: root, evidence: filepath.Join(root, "evidence")}
	trials := 1
	g.editJSON(t, "evidence/manifest.json", func(m map[string]any) {
		m["shard"] = map[string]any{"k": s.K, "n": s.N}
		if n, ok := m["flags"].(map[string]any)["trials"].(string); ok {
			fmt.Sscan(n, &trials)
		}
	})
	for _, name := range []string{"results.json", "run.json"} {
		if _, err := os.Stat(g.path("evidence/" + name)); err != nil {
			continue
		}
		g.editJSON(t, "evidence/"+name, func(d map[string]any) {
			d["runs"] = slices.DeleteFunc(d["runs"].([]any), func(r any) bool {
				rm := r.(map[string]any)
				return !s.HoldsStoreRun(rm["case"].(string), rm["store"].(string))
			})
		})
	}
	if _, err := os.Stat(g.path("evidence/" + TargetsFile)); err == nil {
		g.editJSON(t, "evidence/"+TargetsFile, func(d map[string]any) {
			for _, x := range d["targets"].([]any) {
				tm := x.(map[string]any)
				var kept []any
				for _, r := range tm["runs"].([]any) {
					if rec := sliceRecord(r.(map[string]any), tm["name"].(string), s, trials); rec != nil {
						kept = append(kept, rec)
					}
				}
				tm["runs"] = append([]any{}, kept...)
			}
		})
	}
	for _, name := range derivedFiles {
		os.Remove(g.path("evidence/" + name))
	}
	rehash(g, t)
	return g
}

// sliceRecord is a case's record as slice s holds it, nil if s holds
// none of its trials.
func sliceRecord(rm map[string]any, target string, s shard.Slice, trials int) map[string]any {
	c := rm["case"].(string)
	if rm["not_run"] != "" {
		if len(s.Trials(target, c, 1)) == 0 {
			return nil
		}
		return rm
	}
	all := []map[string]any{{}}
	for k, v := range rm {
		if k != "case" && k != "not_run" && k != "further_trials" {
			all[0][k] = v
		}
	}
	further, _ := rm["further_trials"].([]any)
	for _, x := range further {
		all = append(all, x.(map[string]any))
	}
	held := s.Trials(target, c, trials)
	if len(held) == 0 {
		return nil
	}
	out := map[string]any{"case": c, "not_run": ""}
	for k, v := range all[held[0]-1] {
		out[k] = v
	}
	var rest []any
	for _, k := range held[1:] {
		rest = append(rest, all[k-1])
	}
	if len(rest) > 0 {
		out["further_trials"] = rest
	}
	return out
}

// withTrials makes the target fixture a run of 3 trials a case: each
// runnable case's trial repeated twice more as its further trials.
func withTrials(t *testing.T, f *fixture) {
	t.Helper()
	f.editJSON(t, "evidence/"+TargetsFile, func(d map[string]any) {
		for _, x := range d["targets"].([]any) {
			for _, r := range x.(map[string]any)["runs"].([]any) {
				rm := r.(map[string]any)
				if rm["not_run"] != "" {
					continue
				}
				trial := map[string]any{}
				for _, k := range []string{"counter", "exit_codes", "calls", "detail"} {
					trial[k] = rm[k]
				}
				rm["further_trials"] = []any{trial, trial}
			}
		}
	})
	f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["flags"] = map[string]any{"trials": "3"} })
	f.rehashTargets(t)
}

// Ensure a run split in slices and merged again is the run: each slice of
// the store fixture and of the target fixture (3 trials a case) audits on
// its own as a slice, derives nothing, and audit -merge joins the slices
// (given in any order) into a folder that audits like the whole run, with
// the whole run's verdicts and reports byte for byte.
func TestSliceAndMerge(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fixture func(t *testing.T) *fixture
		rehash  func(*fixture, *testing.T)
		n       int
	}{
		{"stores", newFixture, (*fixture).rehash, 2},
		{"stores, 3 slices", newFixture, (*fixture).rehash, 3},
		{"targets, 3 trials", func(t *testing.T) *fixture {
			f := newTargetFixture(t)
			withTrials(t, f)
			return f
		}, (*fixture).rehashTargets, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			whole := tc.fixture(t)
			if r, _ := auditText(t, whole); !r.Pass {
				t.Fatalf("the whole run fails its audit: %v", messages(r))
			}
			var dirs []string
			for k := tc.n; k >= 1; k-- {
				s := whole.sliceOf(t, shard.Slice{K: k, N: tc.n}, tc.rehash)
				r, _ := auditText(t, s)
				if !r.Pass || r.Shard != s.sliceName(t) {
					t.Fatalf("slice %d/%d: pass %v, shard %q: %v", k, tc.n, r.Pass, r.Shard, messages(r))
				}
				for _, name := range derivedFiles {
					if _, err := os.Stat(s.path("evidence/" + name)); err == nil {
						t.Errorf("slice %d/%d: the audit derived %s", k, tc.n, name)
					}
				}
				dirs = append(dirs, s.evidence)
			}
			out := filepath.Join(t.TempDir(), "merged")
			r, err := Merge(MergeOptions{Root: whole.root, Out: out, Slices: dirs})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Pass {
				t.Fatalf("the merged run fails its audit: %v", messages(r))
			}
			for _, name := range []string{VerdictsFile, ReportFile, TargetsReportFile, MatrixFile} {
				want, err := os.ReadFile(whole.path("evidence/" + name))
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				if got := mustRead(t, filepath.Join(out, name)); !bytes.Equal(got, want) {
					t.Errorf("the merged run's %s differs from the whole run's", name)
				}
			}
		})
	}
}

// sliceName is the slice a fixture's manifest records, as K/N.
func (f *fixture) sliceName(t *testing.T) string {
	m := f.readJSON(t, "evidence/manifest.json")["shard"].(map[string]any)
	return fmt.Sprintf("%v/%v", m["k"], m["n"])
}

// Ensure a slice holds exactly its cells: a run on a store or a trial on
// a target another slice holds, or one of its own missing, fails its
// audit, as does a manifest.shard that is no slice; and merge refuses
// slices that overlap, one missing, and slices of other runs.
func TestSliceBroken(t *testing.T) {
	store := newFixture(t)
	targets := newTargetFixture(t)
	withTrials(t, targets)
	other := func(f *fixture, rehash func(*fixture, *testing.T)) *fixture {
		return f.sliceOf(t, shard.Slice{K: 2, N: 2}, rehash)
	}
	s2 := other(store, (*fixture).rehash)
	t2 := other(targets, (*fixture).rehashTargets)
	for _, tc := range []struct {
		name  string
		from  *fixture
		edit  func(t *testing.T, f *fixture)
		want  string
		stage func(*fixture, *testing.T)
	}{
		{"a store run of another slice", store, func(t *testing.T, f *fixture) {
			extra := s2.readJSON(t, "evidence/results.json")["runs"].([]any)[0]
			f.editJSON(t, "evidence/results.json", func(d map[string]any) { d["runs"] = append(d["runs"].([]any), extra) })
			f.syncRunFile(t)
		}, "unexpected run (not one of manifest.selection's that slice 1/2 holds)", (*fixture).rehash},
		{"a store run of its own missing", store, func(t *testing.T, f *fixture) {
			f.editJSON(t, "evidence/results.json", func(d map[string]any) { d["runs"] = d["runs"].([]any)[1:] })
			f.syncRunFile(t)
		}, "missing run", (*fixture).rehash},
		{"a trial of another slice", targets, func(t *testing.T, f *fixture) {
			f.editJSON(t, "evidence/"+TargetsFile, func(d map[string]any) {
				rm := d["targets"].([]any)[0].(map[string]any)["runs"].([]any)[0].(map[string]any)
				rm["further_trials"] = append(anyList(rm["further_trials"]), map[string]any{"counter": rm["counter"], "exit_codes": rm["exit_codes"], "calls": rm["calls"], "detail": rm["detail"]})
			})
		}, "; slice 1/2 holds trials", (*fixture).rehashTargets},
		{"a case of its own missing", targets, func(t *testing.T, f *fixture) {
			f.editJSON(t, "evidence/"+TargetsFile, func(d map[string]any) {
				tm := d["targets"].([]any)[0].(map[string]any)
				tm["runs"] = tm["runs"].([]any)[1:]
			})
		}, "expected one per case of manifest.json selection.cases with a trial in slice 1/2", (*fixture).rehashTargets},
		{"a shard that is no slice", store, func(t *testing.T, f *fixture) {
			f.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["shard"] = map[string]any{"k": 3, "n": 2} })
		}, `manifest.json: shard: {"k":3,"n":2}: not a slice`, (*fixture).rehash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.from.sliceOf(t, shard.Slice{K: 1, N: 2}, tc.stage)
			tc.edit(t, s)
			tc.stage(s, t)
			r, _ := auditText(t, s)
			if r.Pass || !slices.ContainsFunc(messages(r), func(m string) bool { return strings.Contains(m, tc.want) }) {
				t.Errorf("audit: pass %v, %q; want a failure saying %q", r.Pass, messages(r), tc.want)
			}
		})
	}

	s1 := store.sliceOf(t, shard.Slice{K: 1, N: 2}, (*fixture).rehash)
	edited := store.sliceOf(t, shard.Slice{K: 2, N: 2}, (*fixture).rehash)
	edited.editJSON(t, "evidence/manifest.json", func(m map[string]any) { m["flags"] = map[string]any{"seed": "7"} })
	for _, tc := range []struct {
		name   string
		slices []string
		want   string
	}{
		{"overlap", []string{s1.evidence, s1.evidence, s2.evidence}, "are both slice 1/2: they overlap"},
		{"missing", []string{s1.evidence}, "slice 2/2 is missing"},
		{"other split", []string{s1.evidence, store.sliceOf(t, shard.Slice{K: 2, N: 3}, (*fixture).rehash).evidence}, "slices of different splits"},
		{"whole", []string{s1.evidence, store.evidence}, "no shard: a whole run"},
		{"other run", []string{s1.evidence, edited.evidence}, "manifest.json flags differs between slice 1/2"},
		{"other target run", []string{s1.evidence, t2.evidence}, "differs between slice 1/2"},
	} {
		out := filepath.Join(t.TempDir(), "merged")
		_, err := Merge(MergeOptions{Root: store.root, Out: out, Slices: tc.slices})
		if !errors.Is(err, ErrMerge) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Merge: %v, want %v saying %q", tc.name, err, ErrMerge, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: a refused merge made %s", tc.name, out)
		}
	}
}

func anyList(v any) []any {
	l, _ := v.([]any)
	return l
}

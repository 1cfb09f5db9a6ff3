package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/audit"
	"idemlab/internal/audit/shard"
	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
)

// Ensure a run split in slices (-shard K/N) and joined again (audit
// -merge) is the whole run: two slices of a run on a target and a store
// each audit on their own as a slice, hold every cell between them once,
// and merge into a folder that audits like a whole run and whose
// verdicts equal those of the unsharded run with the same selection
// (own-service's check-then-act found in both); slices that overlap,
// leave one out, come from another run or break their slice are refused.
func TestShardsMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab and runs targets")
	}
	own := writeOwnService(t)
	tmp := t.TempDir()
	run := func(name string, s shard.Slice, want error) string {
		out := filepath.Join(tmp, name)
		var log bytes.Buffer
		err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: []protocol.Store{protocol.Volatile}, StoresGiven: true,
			Intents: DefaultIntents, Targets: []string{own}, Case: "keyed_lost_reply,concurrent_duplicate,replicas_lost_reply",
			Trials: 3, Shard: s, Stdout: &log, Stderr: &log})
		if !errors.Is(err, want) || (err == nil) != (want == nil) {
			t.Fatalf("runner -shard %s: %v, want %v\n%s", s, err, want, log.String())
		}
		return out
	}
	whole := run("whole", shard.Slice{}, ErrViolations)
	s1 := run("s1", shard.Slice{K: 1, N: 2}, nil) // a slice is judged once merged: no gate
	s2 := run("s2", shard.Slice{K: 2, N: 2}, nil)
	sinktest.CheckNoneLeft(t, "own-service")

	checkSlicesSplit(t, whole, s1, s2)
	merged := filepath.Join(tmp, "merged")
	r, err := audit.Merge(audit.MergeOptions{Root: "../..", Out: merged, Slices: []string{s2, s1}, AllowDirty: true})
	if err != nil {
		t.Fatalf("audit -merge: %v", err)
	}
	if !r.Pass {
		var b bytes.Buffer
		r.WriteText(&b)
		t.Fatalf("the merged folder fails its audit:\n%s", b.String())
	}
	if !r.Gate(false).Failed() {
		t.Errorf("the merged run's gate passes; own-service's check-then-act fails it")
	}
	if got, want := verdictsOf(t, merged), verdictsOf(t, whole); got != want {
		t.Errorf("merged verdicts:\n%s\nwant those of the whole run:\n%s", got, want)
	}

	for _, tc := range []struct {
		name   string
		slices []string
		want   string
	}{
		{"overlap", []string{s1, s1, s2}, "are both slice 1/2: they overlap"},
		{"missing", []string{s2}, "slice 1/2 is missing"},
		{"whole", []string{whole, s1}, "no shard: a whole run"},
		{"other run", []string{s1, editManifest(t, s2, "source_commit", strings.Repeat("0", 40))}, "manifest.json source_commit differs between slice 1/2"},
		{"broken slice", []string{s1, dropFirstTargetRun(t, s2)}, "slice 2/2 (" + filepath.Join(tmp, "broken") + ") fails its own audit"},
	} {
		out := filepath.Join(t.TempDir(), "merged")
		_, err := audit.Merge(audit.MergeOptions{Root: "../..", Out: out, Slices: tc.slices, AllowDirty: true})
		if !errors.Is(err, audit.ErrMerge) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: audit -merge: %v, want %v saying %q", tc.name, err, audit.ErrMerge, tc.want)
		}
		if _, err := os.Stat(filepath.Join(out, "manifest.json")); err == nil {
			t.Errorf("%s: a refused merge wrote %s", tc.name, out)
		}
	}
	if _, err := audit.Merge(audit.MergeOptions{Root: "../..", Out: merged, Slices: []string{s1, s2}, AllowDirty: true}); err == nil || !strings.Contains(err.Error(), "want a new or empty folder") {
		t.Errorf("audit -merge into a folder holding a run: %v, want refused", err)
	}
}

// checkSlicesSplit checks that the slices hold the whole run's cells
// between them, each once: its runs on the store and its trials of each
// case on the target.
func checkSlicesSplit(t *testing.T, whole string, slices ...string) {
	t.Helper()
	type doc struct {
		Runs []struct {
			Case  string `json:"case"`
			Store string `json:"store"`
		} `json:"runs"`
	}
	type targets struct {
		Targets []struct {
			Runs []struct {
				Case    string `json:"case"`
				NotRun  string `json:"not_run"`
				Further []any  `json:"further_trials"`
			} `json:"runs"`
		} `json:"targets"`
	}
	count := func(dir string) map[string]int {
		var d doc
		var tg targets
		readEvidence(t, dir, "results.json", &d)
		readEvidence(t, dir, "targets.json", &tg)
		n := map[string]int{}
		for _, r := range d.Runs {
			n[r.Case+"/"+r.Store]++
		}
		for _, r := range tg.Targets[0].Runs {
			n[r.Case+"@own-service"] += 1 + len(r.Further)
		}
		return n
	}
	want, got := count(whole), map[string]int{}
	for _, s := range slices {
		for k, v := range count(s) {
			got[k] += v
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the slices hold %v between them; the whole run %v", got, want)
	}
}

// verdictsOf is a folder's verdicts on stores and targets, a line each.
func verdictsOf(t *testing.T, dir string) string {
	t.Helper()
	var v struct {
		Stores []struct {
			Case, Store string
			Matches     bool
		} `json:"stores"`
		Targets []struct {
			Runs []struct {
				Case   string         `json:"case"`
				NotRun string         `json:"not_run"`
				Safety string         `json:"safety"`
				Trials int            `json:"trials"`
				Tally  map[string]int `json:"tally"`
			} `json:"runs"`
		} `json:"targets"`
	}
	readEvidence(t, dir, "verdicts.json", &v)
	var b strings.Builder
	for _, s := range v.Stores {
		fmt.Fprintf(&b, "%s/%s matches=%v\n", s.Case, s.Store, s.Matches)
	}
	for _, r := range v.Targets[0].Runs {
		fmt.Fprintf(&b, "%s: %s %q trials=%d %v\n", r.Case, r.Safety, r.NotRun, r.Trials, r.Tally)
	}
	return b.String()
}

// editManifest copies the folder dir and sets a manifest field in the copy.
func editManifest(t *testing.T, dir, field string, value any) string {
	t.Helper()
	cp := copyFolder(t, dir, "edited")
	var m map[string]any
	readEvidence(t, cp, "manifest.json", &m)
	m[field] = value
	writeJSON(t, cp, "manifest.json", m)
	return cp
}

// dropFirstTargetRun copies the slice dir, drops the first run of its
// target and lists the file's new hash: a slice that lacks a cell of its
// share, whose hashes still hold.
func dropFirstTargetRun(t *testing.T, dir string) string {
	t.Helper()
	cp := copyFolder(t, dir, "broken")
	var doc map[string]any
	readEvidence(t, cp, "targets.json", &doc)
	tg := doc["targets"].([]any)[0].(map[string]any)
	tg["runs"] = tg["runs"].([]any)[1:]
	data := writeJSON(t, cp, "targets.json", doc)
	var m map[string]any
	readEvidence(t, cp, "manifest.json", &m)
	sum := sha256.Sum256(data)
	m["files"].(map[string]any)["targets.json"] = hex.EncodeToString(sum[:])
	writeJSON(t, cp, "manifest.json", m)
	return cp
}

func copyFolder(t *testing.T, dir, name string) string {
	t.Helper()
	cp := filepath.Join(filepath.Dir(dir), name)
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return cp
}

func writeJSON(t *testing.T, dir, name string, v any) []byte {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

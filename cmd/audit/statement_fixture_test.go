package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"idemlab/internal/audit"
)

// stampStatement writes DIR/statement.intoto.json for DIR's manifest, as
// the current runner writes it (the goldens' evidence comes from a runner
// that predates the statement) and as a forger covering their tracks
// would after each edit: every listed file and manifest.json as subjects,
// the selected runs of results.json as tests (failed where the audit, run
// against ROOT, finds an expectation failure), the commit and the case
// files as configuration. A folder whose manifest does not parse is left
// as it is.
func stampStatement(root, dir string) error {
	name := filepath.Join(dir, audit.StatementFile)
	mb, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(mb, &m) != nil || m == nil {
		return nil
	}
	os.Remove(name)
	failed := map[string]bool{}
	if r, err := audit.Audit(audit.Options{Root: root, Evidence: dir, AllowDirty: true, AllowMutation: true}); err == nil {
		for _, f := range r.Failures {
			if f.Check == audit.CheckExpectation {
				failed[f.Case+"/"+f.Store] = true
			}
		}
	}
	strs := func(v any) []string {
		var out []string
		arr, _ := v.([]any)
		for _, x := range arr {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	sel, _ := m["selection"].(map[string]any)
	passedT, failedT := []string{}, []string{}
	if rb, err := os.ReadFile(filepath.Join(dir, "results.json")); err == nil {
		var res struct {
			Runs []struct{ Case, Store string } `json:"runs"`
		}
		json.Unmarshal(rb, &res)
		for _, r := range res.Runs {
			n := r.Case + "/" + r.Store
			switch {
			case !slices.Contains(strs(sel["cases"]), r.Case) || !slices.Contains(strs(sel["stores"]), r.Store):
			case failed[n]:
				failedT = append(failedT, n)
			default:
				passedT = append(passedT, n)
			}
		}
	}
	type desc struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	}
	files, _ := m["files"].(map[string]any)
	sum := sha256.Sum256(mb)
	subjects := []desc{{"manifest.json", map[string]string{"sha256": hex.EncodeToString(sum[:])}}}
	for n, v := range files {
		s, _ := v.(string)
		subjects = append(subjects, desc{n, map[string]string{"sha256": s}})
	}
	sort.Slice(subjects, func(i, j int) bool { return subjects[i].Name < subjects[j].Name })
	commit, _ := m["source_commit"].(string)
	config := []desc{{"source_commit", map[string]string{"gitCommit": commit}}}
	sources, _ := m["sources"].(map[string]any)
	var cases []string
	for p := range sources {
		if strings.HasPrefix(p, "cases/") {
			cases = append(cases, p)
		}
	}
	sort.Strings(cases)
	for _, p := range cases {
		s, _ := sources[p].(string)
		config = append(config, desc{p, map[string]string{"sha256": s}})
	}
	result := "PASSED"
	if len(failedT) > 0 {
		result = "FAILED"
	}
	st := map[string]any{
		"_type": "https://in-toto.io/Statement/v1", "subject": subjects,
		"predicateType": "https://in-toto.io/attestation/test-result/v0.1",
		"predicate": map[string]any{"result": result, "configuration": config,
			"passedTests": passedT, "warnedTests": []string{}, "failedTests": failedT},
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(name, append(data, '\n'), 0o644)
}

// restampAfter keeps DIR's statement in step after FILE (in DIR) was
// written: only the manifest and results.json change what it says, and
// only a folder that has a statement gets one again.
func restampAfter(name string) error {
	dir, file := filepath.Split(name)
	if file != "manifest.json" && file != "results.json" {
		return nil
	}
	if dir == "" {
		dir = "."
	}
	if _, err := os.Stat(filepath.Join(dir, audit.StatementFile)); err != nil {
		return nil
	}
	root, _ := os.Getwd()
	if r, err := filepath.Abs(filepath.Join(dir, "..")); err == nil {
		if _, err := os.Stat(filepath.Join(r, "cases")); err == nil {
			root = r
		}
	}
	return stampStatement(root, filepath.Clean(dir))
}

// onlyStatementMissing reports whether a runner's output says its audit
// failed for one reason only: no statement.intoto.json (the goldens' base
// runner predates it; prepare stamps one afterwards).
func onlyStatementMissing(out []byte) bool {
	lines := strings.Split(string(out), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "FAIL: 1 check") })
	return i >= 0 && i+1 < len(lines) && strings.HasPrefix(lines[i+1], audit.StatementFile+": missing:")
}

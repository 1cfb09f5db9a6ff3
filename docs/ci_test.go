package docs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"idemlab/internal/audit"

	"github.com/joshdk/go-junit"
)

// A ciStep is one step of ci.md's job, as far as a test can run it: its
// name, its shell script (empty for a `uses:` step), its working
// directory, and the paths an upload step keeps.
type ciStep struct {
	job, name, run, dir string
	uses, pattern       string // an action's name; download-artifact's pattern
	paths               []string
}

// ciWorkflow is yaml block i of ci.md.
func ciWorkflow(t *testing.T, i int) string {
	t.Helper()
	page, err := os.ReadFile("ci.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(page, -1)
	if len(m) <= i {
		t.Fatalf("ci.md has %d yaml blocks, no block %d", len(m), i)
	}
	return string(m[i][1])
}

// ciSteps parses the steps of a workflow of ci.md: a job is a name at
// indentation 2 under jobs; each step starts with "- " at the steps'
// indentation; a "KEY: |" value is the lines indented below it.
func ciSteps(workflow string) []ciStep {
	var steps []map[string][]string
	var jobs []string // each step's job
	job := ""
	block, blockIndent := "", 0 // the "|" value being read
	for _, line := range strings.Split(workflow, "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		text := strings.TrimSpace(line)
		if block != "" && (indent > blockIndent || text == "") {
			if text != "" {
				steps[len(steps)-1][block] = append(steps[len(steps)-1][block], strings.TrimPrefix(line, strings.Repeat(" ", blockIndent+2)))
			}
			continue
		}
		block = ""
		if indent == 2 && strings.HasSuffix(text, ":") {
			job = strings.TrimSuffix(text, ":")
		}
		if strings.HasPrefix(text, "- ") && indent == 6 {
			steps, jobs = append(steps, map[string][]string{}), append(jobs, job)
			text, indent = strings.TrimPrefix(text, "- "), indent+2
		}
		key, value, ok := strings.Cut(text, ":")
		if len(steps) == 0 || !ok {
			continue
		}
		if value = strings.TrimSpace(value); value == "|" {
			block, blockIndent = key, indent
		} else {
			steps[len(steps)-1][key] = []string{value}
		}
	}
	out := make([]ciStep, len(steps))
	for i, f := range steps {
		out[i] = ciStep{job: jobs[i], name: strings.Join(f["name"], ""), run: strings.Join(f["run"], "\n"), dir: strings.Join(f["working-directory"], ""),
			uses: strings.Join(f["uses"], ""), pattern: strings.Join(f["pattern"], ""), paths: f["path"]}
	}
	return out
}

// Ensure ci.md's job runs as written: on a zoo service with a known
// violation (check-then-act), the lab's step exits 6 and writes a JUnit
// report that lists every case, the audit step passes on the folder, and
// the upload step finds what it keeps.
func TestCIJobAsWritten(t *testing.T) {
	t.Parallel() // beside TestCIMatrixAsWritten: each on machines (folders) of its own; the runners share the setup lock, as two CI jobs would
	if testing.Short() {
		t.Skip("runs the lab on a zoo service")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	env := append(os.Environ(), "RUNNER_TEMP="+tmp, "GITHUB_WORKSPACE="+tmp,
		"SERVICE_DIR="+filepath.Join(root, "zoo", "go-check-then-act"))
	ran := 0
	for _, s := range ciSteps(ciWorkflow(t, 0)) {
		switch {
		case s.run != "":
			want := 0
			if strings.Contains(s.run, "runner\" -target") {
				want = 6 // the service's check-then-act is a violation
			}
			runStep(t, s, root, tmp, env, want)
			ran++
		case len(s.paths) > 0:
			checkKept(t, s, tmp)
		}
	}
	if ran < 3 {
		t.Fatalf("ran %d steps of ci.md's job, want its 3 run steps", ran)
	}
	listed := junitStatuses(t, filepath.Join(tmp, "idemlab-junit.xml"))
	cases, _ := filepath.Glob(filepath.Join(root, "cases", "*.json"))
	if len(listed) != len(cases) {
		t.Errorf("the JUnit report lists %d cases, cases/ holds %d", len(listed), len(cases))
	}
	if listed["concurrent_duplicate"] != junit.StatusFailed {
		t.Errorf("concurrent_duplicate: %q in the JUnit report, want failed", listed["concurrent_duplicate"])
	}
}

// runStep runs step s's script as a CI system would, in its working
// directory (idemlab: the lab's checkout root; else machine, the
// workspace), and checks that it exits want.
func runStep(t *testing.T, s ciStep, root, machine string, env []string, want int) {
	t.Helper()
	if strings.Contains(s.run, "${{") {
		t.Errorf("step %q: its script uses a CI expression; plain shell only", s.name)
	}
	dir := machine
	if s.dir == "idemlab" {
		dir = root // the lab's checkout
	}
	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", s.run)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("step %q: %v", s.name, err)
	}
	if code != want {
		t.Errorf("step %q exited %d, want %d:\n%s", s.name, code, want, out)
	}
}

// checkKept checks that the paths an upload step keeps exist on machine,
// and returns them.
func checkKept(t *testing.T, s ciStep, machine string) []string {
	t.Helper()
	var kept []string
	for _, p := range s.paths {
		p = strings.ReplaceAll(strings.TrimSpace(p), "${{ runner.temp }}", machine)
		if _, err := os.Stat(p); err != nil {
			t.Errorf("step %q keeps %s: %v", s.name, p, err)
		}
		kept = append(kept, p)
	}
	return kept
}

// Ensure ci.md's matrix runs as written: each leg of the slice job on a
// machine of its own (a folder), its upload step keeping its slice as an
// artifact (a folder copied), then the merge job on another, its download
// step fetching every slice: the merge step joins them and exits 6 on a
// zoo service with a known violation (check-then-act), its JUnit report
// lists every case with concurrent_duplicate failed, and the merged folder
// audits as a whole run.
func TestCIMatrixAsWritten(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the lab on a zoo service")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	workflow := ciWorkflow(t, 1)
	legs := regexp.MustCompile(`(?m)^ +shard: \[([0-9, ]+)\]$`).FindStringSubmatch(workflow)
	of := regexp.MustCompile(`(?m)^ +SHARDS: ([0-9]+)$`).FindStringSubmatch(workflow)
	if legs == nil || of == nil || strings.Count(legs[1], ",")+1 != atoi(t, of[1]) {
		t.Fatalf("ci.md's matrix: want a shard list and SHARDS, its length; found %q and %q", legs, of)
	}
	artifacts := t.TempDir()
	machineEnv := func(machine string, more ...string) []string {
		return append(os.Environ(), append([]string{"RUNNER_TEMP=" + machine, "GITHUB_WORKSPACE=" + machine,
			"SERVICE_DIR=" + filepath.Join(root, "zoo", "go-check-then-act")}, more...)...)
	}
	steps := ciSteps(workflow)
	t.Run("slices", func(t *testing.T) { // the legs at once, as CI runs them
		for _, k := range strings.Split(legs[1], ",") {
			k = strings.TrimSpace(k)
			t.Run("shard "+k, func(t *testing.T) {
				t.Parallel()
				machine := t.TempDir()
				env := machineEnv(machine, "SHARD="+k, "SHARDS="+of[1])
				for _, s := range steps {
					switch {
					case s.job != "slice":
					case s.run != "":
						runStep(t, s, root, machine, env, 0) // a slice is judged once merged
					case strings.HasPrefix(s.uses, "actions/upload-artifact"):
						name := strings.ReplaceAll(s.name, "${{ matrix.shard }}", k)
						for _, p := range checkKept(t, s, machine) {
							if err := os.CopyFS(filepath.Join(artifacts, name), os.DirFS(p)); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	machine := t.TempDir()
	env := machineEnv(machine)
	ran := 0
	for _, s := range steps {
		switch {
		case s.job != "merge":
		case strings.HasPrefix(s.uses, "actions/download-artifact"):
			found, _ := filepath.Glob(filepath.Join(artifacts, s.pattern))
			if len(found) != atoi(t, of[1]) {
				t.Fatalf("step %q: the pattern %s finds %d artifacts, want %s", s.uses, s.pattern, len(found), of[1])
			}
			into := strings.ReplaceAll(s.paths[0], "${{ runner.temp }}", machine)
			for _, f := range found {
				if err := os.CopyFS(filepath.Join(into, filepath.Base(f)), os.DirFS(f)); err != nil {
					t.Fatal(err)
				}
			}
		case s.run != "":
			want := 0
			if strings.Contains(s.run, "-merge") {
				want = 6 // the whole run's gate: check-then-act
			}
			runStep(t, s, root, machine, env, want)
			ran++
		case len(s.paths) > 0:
			checkKept(t, s, machine)
		}
	}
	if ran < 1 {
		t.Fatal("ran no step of ci.md's merge job")
	}
	listed := junitStatuses(t, filepath.Join(machine, "idemlab-junit.xml"))
	cases, _ := filepath.Glob(filepath.Join(root, "cases", "*.json"))
	if len(listed) != len(cases) || listed["concurrent_duplicate"] != junit.StatusFailed {
		t.Errorf("the merged run's JUnit report lists %d cases (cases/ holds %d), concurrent_duplicate %q (want failed)", len(listed), len(cases), listed["concurrent_duplicate"])
	}
	r, err := audit.Audit(audit.Options{Root: root, Evidence: filepath.Join(machine, "idemlab-evidence")})
	if err != nil || !r.Pass || r.Shard != "" {
		t.Errorf("the merged folder: audit %v, pass %v, slice %q; want a whole run that passes", err, r != nil && r.Pass, r.Shard)
	}
}

// junitStatuses reads a JUnit report with a JUnit reader: each testcase's
// status by name.
func junitStatuses(t *testing.T, file string) map[string]junit.Status {
	t.Helper()
	suites, err := junit.IngestFile(file)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]junit.Status{}
	for _, s := range suites {
		for _, tc := range s.Tests {
			listed[tc.Name] = tc.Status
		}
	}
	return listed
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

package docs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/joshdk/go-junit"
)

// A ciStep is one step of ci.md's job, as far as a test can run it: its
// name, its shell script (empty for a `uses:` step), its working
// directory, and the paths an upload step keeps.
type ciStep struct {
	name, run, dir string
	paths          []string
}

// ciSteps parses the steps of the one yaml block of ci.md: each step
// starts with "- " at the steps' indentation; a "KEY: |" value is the
// lines indented below it.
func ciSteps(t *testing.T) []ciStep {
	t.Helper()
	page, err := os.ReadFile("ci.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindSubmatch(page)
	if m == nil {
		t.Fatal("ci.md has no yaml block")
	}
	var steps []map[string][]string
	block, blockIndent := "", 0 // the "|" value being read
	for _, line := range strings.Split(string(m[1]), "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		text := strings.TrimSpace(line)
		if block != "" && (indent > blockIndent || text == "") {
			if text != "" {
				steps[len(steps)-1][block] = append(steps[len(steps)-1][block], strings.TrimPrefix(line, strings.Repeat(" ", blockIndent+2)))
			}
			continue
		}
		block = ""
		if strings.HasPrefix(text, "- ") && indent == 6 {
			steps = append(steps, map[string][]string{})
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
		out[i] = ciStep{name: strings.Join(f["name"], ""), run: strings.Join(f["run"], "\n"), dir: strings.Join(f["working-directory"], ""), paths: f["path"]}
	}
	return out
}

// Ensure ci.md's job runs as written: on a zoo service with a known
// violation (check-then-act), the lab's step exits 6 and writes a JUnit
// report that lists every case, the audit step passes on the folder, and
// the upload step finds what it keeps.
func TestCIJobAsWritten(t *testing.T) {
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
	for _, s := range ciSteps(t) {
		switch {
		case s.run != "":
			if strings.Contains(s.run, "${{") {
				t.Errorf("step %q: its script uses a CI expression; plain shell only", s.name)
			}
			dir := tmp
			if s.dir == "idemlab" {
				dir = root // the lab's checkout
			}
			cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", s.run)
			cmd.Dir, cmd.Env = dir, env
			out, err := cmd.CombinedOutput()
			want := 0
			switch {
			case strings.Contains(s.run, "runner\" -target"):
				want = 6 // the service's check-then-act is a violation
			}
			code := 0
			if exit, ok := errors.AsType[*exec.ExitError](err); ok {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatalf("step %q: %v", s.name, err)
			}
			if code != want {
				t.Errorf("step %q exited %d, want %d:\n%s", s.name, code, want, out)
			}
			ran++
		case len(s.paths) > 0:
			for _, p := range s.paths {
				p = strings.ReplaceAll(strings.TrimSpace(p), "${{ runner.temp }}", tmp)
				if _, err := os.Stat(p); err != nil {
					t.Errorf("step %q keeps %s: %v", s.name, p, err)
				}
			}
		}
	}
	if ran < 3 {
		t.Fatalf("ran %d steps of ci.md's job, want its 3 run steps", ran)
	}
	suites, err := junit.IngestFile(filepath.Join(tmp, "idemlab-junit.xml"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]junit.Status{}
	for _, s := range suites {
		for _, tc := range s.Tests {
			listed[tc.Name] = tc.Status
		}
	}
	cases, _ := filepath.Glob(filepath.Join(root, "cases", "*.json"))
	if len(listed) != len(cases) {
		t.Errorf("the JUnit report lists %d cases, cases/ holds %d", len(listed), len(cases))
	}
	if listed["concurrent_duplicate"] != junit.StatusFailed {
		t.Errorf("concurrent_duplicate: %q in the JUnit report, want failed", listed["concurrent_duplicate"])
	}
}

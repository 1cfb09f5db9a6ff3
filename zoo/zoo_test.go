//go:build unix

package zoo_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var runZoo = flag.Bool("zoo", false, "run the reference zoo through the lab (minutes; IDEMLAB_ZOO=1 does the same)")

// truth is a service's truth.json: what it is, and every finding the audit
// must report on it, per case (violations and deviations in findings,
// the findings its claims excuse in limitations).
type truth struct {
	Truth       string              `json:"truth"`
	Findings    map[string][]string `json:"findings"`
	Limitations map[string][]string `json:"limitations"`
}

// verdicts is the part of the audit's verdicts.json the zoo compares.
type verdicts struct {
	Targets []struct {
		Target  string `json:"target"`
		Skipped string `json:"skipped"`
		Runs    []struct {
			Case       string    `json:"case"`
			NotRun     string    `json:"not_run"`
			Findings   []finding `json:"findings"`
			Deviations []finding `json:"deviations"`
		} `json:"runs"`
	} `json:"targets"`
}

type finding struct {
	Rule       string `json:"rule"`
	Detail     string `json:"detail"`
	Limitation string `json:"limitation"`
}

// limited names a finding that the target's claims excuse.
const limited = " (limitation)"

// Ensure the audit reports, on every service of the zoo, exactly the
// findings its truth.json lists: precision and recall both 100 %.
func TestZoo(t *testing.T) {
	if !*runZoo && os.Getenv("IDEMLAB_ZOO") != "1" {
		t.Skip("the zoo runs every case on every service, more than a minute: go test ./zoo -zoo -v (or IDEMLAB_ZOO=1 go test ./zoo -v)")
	}
	began := time.Now()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	services, truths := readTruths(t, root)
	deadline := time.Now().Add(20 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	v := runLab(ctx, t, root, services)
	s := score(v, truths)
	for _, l := range s.perService {
		t.Log(l)
	}
	for _, why := range sortedKeys(s.notRun) {
		t.Logf("not run: %s (on %s)", why, strings.Join(s.notRun[why], ", "))
	}
	for _, l := range s.unchecked {
		t.Logf("unchecked: %s", l)
	}
	for _, l := range s.errors {
		t.Error(l)
	}
	for _, name := range services {
		if !s.seen[name] {
			t.Errorf("zoo/%s: not in verdicts.json", name)
		}
	}
	summary := fmt.Sprintf("zoo: %d services, precision %s (%d/%d), recall %s (%d/%d), in %v",
		len(services), percent(s.tp, s.tp+len(s.falses)), s.tp, s.tp+len(s.falses),
		percent(s.tp, s.tp+len(s.misses)), s.tp, s.tp+len(s.misses), time.Since(began).Round(time.Second))
	t.Log(summary)
	fmt.Println(summary)
	if len(s.falses)+len(s.misses) > 0 {
		t.Errorf("the audit's findings differ from the zoo's truth:\nfalse findings (reported, not in truth.json):\n  %s\nmissed findings (in truth.json, not reported):\n  %s",
			orNone(s.falses), orNone(s.misses))
	}
}

// runLab builds ./cmd/runner, runs every service's cases with it once, and
// returns the audit's verdicts.
func runLab(ctx context.Context, t *testing.T, root string, services []string) verdicts {
	t.Helper()
	tmp := t.TempDir()
	runner := filepath.Join(tmp, "runner")
	if out, err := command(ctx, root, "go", "build", "-o", runner, "./cmd/runner").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/runner: %v\n%s", err, out)
	}
	// The Go services import zoo/zoohttp, which their folder digests do not
	// cover, so the lab would not run their setups again after a change to
	// it alone: run them here, every time (a go build, quick when nothing
	// changed).
	for _, s := range services {
		var tj struct{ Setup []string }
		b, err := os.ReadFile(filepath.Join(root, "zoo", s, "target.json"))
		if err == nil {
			err = json.Unmarshal(b, &tj)
		}
		if err != nil {
			t.Fatalf("zoo/%s: %v", s, err)
		}
		if len(tj.Setup) == 0 {
			continue
		}
		if out, err := command(ctx, filepath.Join(root, "zoo", s), tj.Setup[0], tj.Setup[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("zoo/%s: setup %s: %v\n%s", s, strings.Join(tj.Setup, " "), err, out)
		}
	}
	evidence := filepath.Join(tmp, "evidence")
	args := []string{"-experiment", "none", "-out", evidence}
	for _, s := range services {
		args = append(args, "-target", "zoo/"+s)
	}
	logPath := filepath.Join(tmp, "runner.log")
	// The zoo's flawed members show safety violations: the runner's gate
	// fails (exit 6), as it must; any other status is a broken run.
	err := runLogged(ctx, root, logPath, runner, args...)
	if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != 6 {
		t.Errorf("runner %s: %v, want exit status 6 (the flawed members fail the gate); its last lines:\n%s", strings.Join(args, " "), err, tail(logPath, 40))
	}
	var v verdicts
	if b, err := os.ReadFile(filepath.Join(evidence, "verdicts.json")); err != nil {
		t.Fatalf("no verdicts to compare: %v", err)
	} else if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("verdicts.json: %v", err)
	}
	return v
}

// A tally is the comparison of the verdicts with the truths.
type tally struct {
	tp             int      // findings reported that the truth lists
	falses, misses []string // reported but not listed; listed but not reported
	perService     []string
	notRun         map[string][]string // "case: why" -> the services it did not run on
	unchecked      []string            // truths of runs that did not happen
	errors         []string            // verdicts and truths that do not line up
	seen           map[string]bool     // the services verdicts.json judges
}

// score compares every run's findings with its service's truth, by rule,
// once per (service, case); a finding its claims excuse is labelled apart.
func score(v verdicts, truths map[string]truth) tally {
	s := tally{notRun: map[string][]string{}, seen: map[string]bool{}}
	for _, vt := range v.Targets {
		tr, ok := truths[vt.Target]
		if !ok {
			s.errors = append(s.errors, fmt.Sprintf("verdicts.json judges %s, which has no truth.json in zoo/", vt.Target))
			continue
		}
		s.seen[vt.Target] = true
		if vt.Skipped != "" {
			s.unchecked = append(s.unchecked, fmt.Sprintf("%s: skipped (%s): its truth was not checked", vt.Target, vt.Skipped))
			continue
		}
		cases := map[string]bool{}
		tp, falses, misses := s.tp, len(s.falses), len(s.misses)
		for _, r := range vt.Runs {
			cases[r.Case] = true
			want := append(labels(tr.Findings[r.Case], ""), labels(tr.Limitations[r.Case], limited)...)
			if r.NotRun != "" {
				why := r.Case + ": " + r.NotRun
				s.notRun[why] = append(s.notRun[why], vt.Target)
				if len(want) > 0 {
					s.unchecked = append(s.unchecked, fmt.Sprintf("%s %s: not run, so %s not checked", vt.Target, r.Case, strings.Join(want, ", ")))
				}
				continue
			}
			got := map[string]string{} // label -> the first detail the audit gave
			for _, f := range append(slices.Clone(r.Findings), r.Deviations...) {
				l := f.Rule
				if f.Limitation != "" {
					l += limited
				}
				if _, dup := got[l]; !dup {
					got[l] = f.Detail
				}
			}
			for _, l := range sortedKeys(got) {
				if slices.Contains(want, l) {
					s.tp++
				} else {
					s.falses = append(s.falses, fmt.Sprintf("%s %s: %s (%s)", vt.Target, r.Case, l, got[l]))
				}
			}
			for _, l := range want {
				if _, ok := got[l]; !ok {
					s.misses = append(s.misses, fmt.Sprintf("%s %s: %s", vt.Target, r.Case, l))
				}
			}
		}
		for _, c := range append(sortedKeys(tr.Findings), sortedKeys(tr.Limitations)...) {
			if !cases[c] {
				s.errors = append(s.errors, fmt.Sprintf("zoo/%s/truth.json names case %s, which the lab did not list", vt.Target, c))
			}
		}
		s.perService = append(s.perService, fmt.Sprintf("%-24s %2d as the truth says, %d false, %d missed: %s",
			vt.Target, s.tp-tp, len(s.falses)-falses, len(s.misses)-misses, tr.Truth))
	}
	return s
}

// readTruths lists the services (the folders of zoo/ holding target.json)
// and reads each one's truth.json strictly.
func readTruths(t *testing.T, root string) ([]string, map[string]truth) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "zoo"))
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	truths := map[string]truth{}
	for _, e := range entries {
		dir := filepath.Join(root, "zoo", e.Name())
		if _, err := os.Stat(filepath.Join(dir, "target.json")); !e.IsDir() || err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "truth.json"))
		if err != nil {
			t.Fatalf("zoo/%s: %v", e.Name(), err)
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		var tr truth
		if err := d.Decode(&tr); err != nil {
			t.Fatalf("zoo/%s/truth.json: %v", e.Name(), err)
		}
		if tr.Truth == "" || strings.ContainsAny(tr.Truth, "\r\n") || tr.Findings == nil {
			t.Fatalf("zoo/%s/truth.json: want a one-line truth and a findings object", e.Name())
		}
		services = append(services, e.Name())
		truths[e.Name()] = tr
	}
	if len(services) == 0 {
		t.Fatal("zoo/ holds no service")
	}
	return services, truths
}

// command is a command run in dir in a process group of its own, which a
// cancelled ctx ends with SIGTERM (the runner then stops what it started),
// then SIGKILL to the group 30 s later.
func command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = procAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	return cmd
}

// runLogged runs name with args in dir, its output into the file logPath,
// and kills whatever is left of its process group once it ended.
func runLogged(ctx context.Context, dir, logPath, name string, args ...string) error {
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := command(ctx, dir, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // on every path: the group, not only the runner
	err = cmd.Wait()
	if ctx.Err() != nil {
		return errors.Join(err, ctx.Err())
	}
	return err
}

// tail returns the last n lines of the file at path, each cut at 300 bytes.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if len(l) > 300 {
			l = l[:300] + " [cut]"
		}
		if lines = append(lines, l); len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// labels returns rules with suffix added to each.
func labels(rules []string, suffix string) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r + suffix
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func percent(n, of int) string {
	if of == 0 {
		return "100 %"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(of))
}

func orNone(lines []string) string {
	if len(lines) == 0 {
		return "(none)"
	}
	return strings.Join(lines, "\n  ")
}

// Ensure the zoo's scorer counts by rule once per (service, case), tells a
// limitation from a violation, and leaves out, listed, what did not run.
func TestScore(t *testing.T) {
	var v verdicts
	if err := json.Unmarshal([]byte(`{"targets": [{"target": "a", "skipped": "", "runs": [
		{"case": "c1", "not_run": "", "findings": [{"rule": "duplicate_effect", "detail": "x"}], "deviations": [{"rule": "retry_after", "detail": "y"}, {"rule": "retry_after", "detail": "z"}]},
		{"case": "c2", "not_run": "", "findings": [{"rule": "duplicate_effect", "detail": "x", "limitation": "volatile"}], "deviations": []},
		{"case": "c3", "not_run": "no shared store", "findings": [], "deviations": []}]}]}`), &v); err != nil {
		t.Fatal(err)
	}
	truths := map[string]truth{"a": {Truth: "t", Findings: map[string][]string{"c1": {"duplicate_effect", "stuck_key"}, "c2": {"duplicate_effect"}, "c3": {"lost_effect"}}}}
	s := score(v, truths)
	if got, want := s.tp, 1; got != want {
		t.Errorf("true findings = %d, want %d", got, want)
	}
	if got, want := strings.Join(s.falses, "; "), "a c1: retry_after (y); a c2: duplicate_effect (limitation) (x)"; got != want {
		t.Errorf("false findings = %q, want %q", got, want)
	}
	if got, want := strings.Join(s.misses, "; "), "a c1: stuck_key; a c2: duplicate_effect"; got != want {
		t.Errorf("missed findings = %q, want %q", got, want)
	}
	if got, want := strings.Join(s.unchecked, "; "), "a c3: not run, so lost_effect not checked"; got != want {
		t.Errorf("unchecked = %q, want %q", got, want)
	}
}

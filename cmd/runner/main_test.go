package main

import (
	"flag"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/retries"
	"idemlab/internal/runner"

	"github.com/google/go-cmdtest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.ct with the actual output")

// TestCLI runs the golden tests in testdata/*.ct. Each file runs in a fresh
// folder holding a copy of the checkout's cases/ and schema/, so a test can
// break a case file without touching the real one.
func TestCLI(t *testing.T) {
	ts, err := cmdtest.Read("testdata")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ts.Setup = func(root string) error {
		for _, dir := range []string{"cases", "schema"} {
			if err := copyDir(filepath.Join(repo, dir), filepath.Join(root, dir)); err != nil {
				return err
			}
		}
		return nil
	}
	ts.Commands["runner"] = cmdtest.InProcessProgram("runner", func() int {
		return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	})
	ts.Run(t, *update)
}

func copyDir(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Ensure the help lists every flag exactly once (it is rendered from the
// FlagSet, so a flag missing from groups would vanish from it), and every
// numeric flag has a bound.
func TestHelpCoversFlags(t *testing.T) {
	var o runner.Options
	fs := newFlags(&o)
	listed := map[string]int{}
	for _, g := range groups {
		for _, name := range g.flags {
			listed[name]++
			if fs.Lookup(name) == nil {
				t.Errorf("help group %q lists -%s, which is not a flag", g.title, name)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if n := listed[f.Name]; n != 1 {
			t.Errorf("-%s is listed %d times in the help's groups, want once", f.Name, n)
		}
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case int, time.Duration:
				if _, ok := boundOf(f.Name); !ok {
					t.Errorf("-%s is numeric but has no bound", f.Name)
				}
			}
		}
	})
	help := usage(fs)
	for _, want := range []string{"default " + strconv.Itoa(retries.Default.MaxAttempts) + ")", "default 3s)"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// Ensure an argument longer than the bound is refused without being
// echoed (the flag package would quote it whole).
func TestLongArgument(t *testing.T) {
	var stdout, stderr strings.Builder
	long := strings.Repeat("x", 1<<20)
	if got, want := run([]string{"-case", long}, nil, &stdout, &stderr), 2; got != want {
		t.Fatalf("run(-case <1 MiB>) = %d, want %d", got, want)
	}
	if got, want := stderr.String(), "runner: argument 2 is 1048576 bytes, at most 4096 (see runner -h)\n"; got != want {
		t.Fatalf("stderr = %q, want %q", got, want)
	}
}

// signalOnLine passes writes on and sends this process SIGINT once the
// output holds line, as a Ctrl-C at that moment would.
type signalOnLine struct {
	strings.Builder
	line string
	sent bool
}

func (w *signalOnLine) Write(b []byte) (int, error) {
	n, err := w.Builder.Write(b)
	if !w.sent && strings.Contains(w.String(), w.line) {
		w.sent = true
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	}
	return n, err
}

// Ensure a SIGINT that comes while the audit runs exits 5 and says the
// evidence was written but not audited (it is there), not exit 4's "wrote
// no evidence".
func TestSIGINTWhileAuditing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab and runs a case")
	}
	out := filepath.Join(t.TempDir(), "evidence")
	t.Chdir(filepath.Join("..", ".."))
	stdout := &signalOnLine{line: "wrote " + out}
	var stderr strings.Builder
	code := run([]string{"-case", "unkeyed_lost_reply", "-store", "volatile", "-out", out}, nil, stdout, &stderr)
	if got, want := code, 5; got != want {
		t.Fatalf("run = %d, want %d\nstdout:\n%s\nstderr:\n%s", got, want, stdout.String(), stderr.String())
	}
	if want := "runner: interrupted while auditing: " + out + " was written but not audited"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr = %q, want it to say %q", stderr.String(), want)
	}
	if _, err := os.Stat(filepath.Join(out, "manifest.json")); err != nil {
		t.Errorf("the evidence the message says was written: %v", err)
	}
}

// Ensure the manifest records the experiments' knobs, -seed and, on
// targets, -trials (and no other flag), each value as the flag takes it again: a run with the
// recorded flags has the options the recorded run had.
func TestRecordedFlagsRoundTrip(t *testing.T) {
	want := []string{"seed", "trials"}
	for _, g := range groups[1:] {
		want = append(want, g.flags...)
	}
	args := []string{"-seed", "9", "-intents", "50", "-drop-percent", "0", "-timeout-ms", "200", "-attempts", "4",
		"-workers", "3", "-deadline-ms", "900", "-duration", "1500ms", "-clients", "2", "-replicas", "3", "-chaos-trials", "2", "-trials", "7"}
	var o runner.Options
	if err := newFlags(&o).Parse(args); err != nil {
		t.Fatal(err)
	}
	rec := o.RecordedFlags(runner.Experiments(), true, true)
	if got := slices.Sorted(maps.Keys(rec)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("RecordedFlags = %v, want the knobs' groups and -seed, all given: %v", rec, want)
	}
	var again []string
	for k, v := range rec {
		again = append(again, "-"+k+"="+v)
	}
	var o2 runner.Options
	if err := newFlags(&o2).Parse(again); err != nil {
		t.Fatalf("parse the recorded flags %v: %v", again, err)
	}
	o.Stdout, o.Stderr, o2.Stdout, o2.Stderr = nil, nil, nil, nil
	if !reflect.DeepEqual(o, o2) {
		t.Fatalf("options from the recorded flags %v = %+v, want %+v", again, o2, o)
	}
}

package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/caserun"
	"idemlab/internal/evidence"
	"idemlab/internal/pgcluster"
	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
)

// Ensure a server that never becomes ready breaks the lab (not the audit)
// and that no server process is left behind: every fake server writes its
// PID, and each must be gone (not even a zombie) when Run returns.
func TestNeverReadyServerLeavesNoProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	fake := filepath.Join(dir, "fake-server")
	script := "#!/bin/sh\necho $$ >> '" + pids + "'\nexec sleep 30\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := caserun.DefaultProtocol
	p.ReadyWithin = 300 * time.Millisecond
	var out bytes.Buffer
	err := Run(context.Background(), Options{
		Root: "../..", Out: filepath.Join(dir, "evidence"), Stores: []protocol.Store{protocol.Volatile}, StoresGiven: true,
		Intents: DefaultIntents, ServerPath: fake, Protocol: &p, Stdout: &out, Stderr: &out,
	})
	var usage *UsageError
	if err == nil || errors.Is(err, ErrAuditFailed) || errors.As(err, &usage) {
		t.Fatalf("Run = %v, want a broken-lab error", err)
	}
	if !strings.Contains(err.Error(), "no READY line") {
		t.Fatalf("Run = %v, want it to say the server never printed READY", err)
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatalf("no server was started: %v", err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server pid %d outlived the runner (kill 0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "evidence")); !os.IsNotExist(err) {
		t.Errorf("a broken lab wrote evidence: %v", err)
	}
}

func TestParseStores(t *testing.T) {
	if got, err := ParseStores("all"); err != nil || !slices.Equal(got, protocol.Stores) {
		t.Fatalf("ParseStores(all) = %v, %v", got, err)
	}
	if got, err := ParseStores("volatile"); err != nil || len(got) != 1 {
		t.Fatalf("ParseStores(volatile) = %v, %v", got, err)
	}
	var usage *UsageError
	if _, err := ParseStores("disk"); !errors.As(err, &usage) {
		t.Fatalf("ParseStores(disk) = %v, want a usage error", err)
	}
}

// Ensure the throwaway PostgreSQL is stopped and removed when the lab
// breaks half-way (a server that never becomes ready) and when the run is
// cancelled (what SIGTERM or Ctrl-C does to the runner): no postgres
// process of that cluster is left, and its folder is gone.
func TestPostgresStoppedOnEveryPath(t *testing.T) {
	if _, err := pgcluster.FindBinDir(); err != nil && os.Getenv(pgclustertest.RequireEnv) != "1" {
		t.Skipf("postgres tests skipped (%s): %v", pgcluster.Hint, err)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake-server")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := caserun.DefaultProtocol
	p.ReadyWithin = 300 * time.Millisecond
	for _, path := range []string{"broken lab", "cancelled"} {
		t.Run(path, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &clusterWatch{cancel: cancel, cancelOnStart: path == "cancelled"}
			err := Run(ctx, Options{
				Root: "../..", Out: filepath.Join(t.TempDir(), "evidence"), Stores: []protocol.Store{protocol.Postgres}, StoresGiven: true,
				PostgresAsked: true, Intents: DefaultIntents, ServerPath: fake, Protocol: &p, Stdout: out, Stderr: out,
			})
			if err == nil {
				t.Fatalf("Run = nil, want an error\n%s", out.String())
			}
			folder := out.folder()
			if folder == "" {
				t.Fatalf("the runner never said where its cluster was:\n%s", out.String())
			}
			if _, err := os.Stat(folder); !os.IsNotExist(err) {
				t.Errorf("cluster folder %s still there: %v", folder, err)
			}
			sinktest.CheckNoneLeft(t, "postgres")
		})
	}
}

// clusterWatch collects the runner's output and, when asked, cancels the
// run as soon as the cluster is up.
type clusterWatch struct {
	bytes.Buffer
	cancel        func()
	cancelOnStart bool
}

func (w *clusterWatch) Write(b []byte) (int, error) {
	n, err := w.Buffer.Write(b)
	if w.cancelOnStart && w.folder() != "" {
		w.cancel()
	}
	return n, err
}

// folder is the cluster folder the runner announced, or "".
func (w *clusterWatch) folder() string {
	_, rest, ok := strings.Cut(w.String(), "a throwaway cluster in ")
	if !ok {
		return ""
	}
	f, _, _ := strings.Cut(rest, " ")
	return f
}

// Ensure an interrupted runner (SIGINT or SIGTERM cancel its context)
// stops, reaps its servers and writes no evidence: the -out folder is left
// as it was (here: never made), and the error says so.
func TestInterruptedRunWritesNothing(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "evidence")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelOnLine{cancel: cancel, line: "effects applied="} // the first finished run
	err := Run(ctx, Options{
		Root: "../..", Out: out, Stores: []protocol.Store{protocol.Volatile, protocol.Durable}, StoresGiven: true, // no target: a store's run is enough
		Intents: DefaultIntents, Experiment: None, Stdout: w, Stderr: w,
	})
	if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "wrote no evidence") {
		t.Fatalf("Run = %v, want ErrInterrupted saying it wrote no evidence\n%s", err, w.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("an interrupted run made %s: %v", out, err)
	}
}

// cancelOnLine collects output and cancels once a line holds line.
type cancelOnLine struct {
	bytes.Buffer
	cancel func()
	line   string
}

func (w *cancelOnLine) Write(b []byte) (int, error) {
	n, err := w.Buffer.Write(b)
	if strings.Contains(w.String(), w.line) {
		w.cancel()
	}
	return n, err
}

// Ensure a run interrupted while the audit runs says what is true: the
// evidence was written (it is there) but not audited; it is not the
// "wrote no evidence" of an interruption before.
func TestInterruptedAuditSaysEvidenceWritten(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "evidence")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelOnLine{cancel: cancel, line: "wrote " + out}
	err := Run(ctx, Options{
		Root: "../..", Out: out, Stores: []protocol.Store{protocol.Volatile}, StoresGiven: true, Case: "unkeyed_lost_reply", // no target: one run to audit is enough
		Intents: DefaultIntents, Stdout: w, Stderr: w,
	})
	if !errors.Is(err, ErrAuditInterrupted) || errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "was written but not audited") {
		t.Fatalf("Run = %v, want ErrAuditInterrupted saying the evidence was written but not audited\n%s", err, w.String())
	}
	if _, err := os.Stat(filepath.Join(out, evidence.ManifestName)); err != nil {
		t.Errorf("the evidence the error says was written is not there: %v", err)
	}
}

// Ensure targets run at once print in target order: the first unfinished
// target's lines at once, the others' once every target before them is done.
func TestOrderedOut(t *testing.T) {
	var out bytes.Buffer
	o := newOrderedOut(&out, 3)
	w0, w1, w2 := o.writer(0), o.writer(1), o.writer(2)
	fmt.Fprintln(w2, "c1")
	fmt.Fprintln(w0, "a1")
	fmt.Fprintln(w1, "b1")
	if got := out.String(); got != "a1\n" {
		t.Fatalf("before any target finished: %q, want only the first target's line", got)
	}
	o.finish(2)
	fmt.Fprintln(w0, "a2")
	o.finish(0)
	if got := out.String(); got != "a1\na2\nb1\n" {
		t.Fatalf("after the first finished: %q, want its lines, then the second's so far", got)
	}
	fmt.Fprintln(w1, "b2")
	o.finish(1)
	if got, want := out.String(), "a1\na2\nb1\nb2\nc1\n"; got != want {
		t.Fatalf("at the end: %q, want %q", got, want)
	}
}

// Ensure the runs on targets are bounded before anything starts: trials ×
// targets × cases above MaxTargetRuns is a usage error naming all four,
// and no evidence is written (its targets.json would pass the audit's cap).
func TestTargetRunsBounded(t *testing.T) {
	out := filepath.Join(t.TempDir(), "evidence")
	var log bytes.Buffer
	err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: protocol.Stores, Intents: DefaultIntents,
		Targets: shippedNames("../.."), Trials: MaxTrials, Stdout: &log, Stderr: &log})
	var usage *UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), fmt.Sprintf("-trials %d: %d trials × ", MaxTrials, MaxTrials)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("at most %d", MaxTargetRuns)) {
		t.Fatalf("Run with -trials %d on every shipped target = %v, want a usage error naming the bound\n%s", MaxTrials, err, log.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused run made %s: %v", out, err)
	}
}

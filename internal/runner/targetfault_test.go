package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"idemlab/internal/caserun"
	"idemlab/internal/protocol"
	"idemlab/internal/target"
)

// faultyTarget writes a target.json named name into a fresh folder, its
// start command argv (ready when {port} listens), with setup and requires
// where given, and returns the folder.
func faultyTarget(t *testing.T, name string, argv, setup, requires []string) string {
	t.Helper()
	q := func(s []string) string {
		var b strings.Builder
		for i, a := range s {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", a)
		}
		return "[" + b.String() + "]"
	}
	var extra string
	if setup != nil {
		extra += fmt.Sprintf(`"setup": %s,`+"\n", q(setup))
	}
	if requires != nil {
		extra += fmt.Sprintf(`"requires": %s, "install": "nothing: it does not exist",`+"\n", q(requires))
	}
	src := fmt.Sprintf(`{
  "name": %q,
  "summary": "a target that cannot run",
  %s
  "start": {"argv": %s, "env": {}, "ready": {"tcp": true}},
  "request": {"path": "/pay", "key_header": "Idempotency-Key"},
  "replay": null,
  "effects": "sink",
  "claims": {"durable": false, "shared_store": false, "capacity": null, "max_body": null}
}`, name, extra, q(argv))
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, target.FileName), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Ensure a target's own failure is a *TargetError (runner exit 7, "the
// target's problem"), not a broken lab (exit 3), on real processes: a
// start command that exits at once, a setup that fails, a folder holding
// a FIFO; and that a target named with -target whose required program is
// missing is a *TargetError too, not a pass, once the evidence saying it
// was skipped is written and audited.
func TestTargetFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab and starts targets")
	}
	// A missing program is a skip here, written and audited, as on a
	// user's machine; CI's IDEMLAB_REQUIRE_TARGETS=1 would stop the run
	// before (TestChaosSkipsMissingProgram covers that setting).
	t.Setenv(target.RequireEnv, "")
	exits := faultyTarget(t, "exits", []string{"sh", "-c", "echo no store here >&2; exit 1", "sh", "{port}"}, nil, nil)
	setupFails := faultyTarget(t, "setup-fails", []string{"sh", "-c", "sleep 60", "sh", "{port}"}, []string{"sh", "-c", "echo npm ERR broken >&2; exit 3"}, nil)
	fifo := faultyTarget(t, "fifo", []string{"sh", "-c", "sleep 60", "sh", "{port}"}, nil, nil)
	if err := syscall.Mkfifo(filepath.Join(fifo, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := faultyTarget(t, "absent", []string{"idemlab-no-such-program", "{port}"}, nil, []string{"idemlab-no-such-program"})
	for _, tc := range []struct {
		dir, name string
		says      string // in the error
		evidence  bool   // the evidence was written and audited
	}{
		{exits, "exits", "exited with code 1 before it was ready", false},
		{setupFails, "setup-fails", "npm ERR broken", false},
		{fifo, "fifo", "pipe", false},
		{absent, "absent", "named with -target, could not run here: idemlab-no-such-program not found (nothing: it does not exist)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "evidence")
			var log bytes.Buffer
			err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: protocol.Stores, Intents: DefaultIntents,
				Case: "keyed_lost_reply", Targets: []string{tc.dir}, Stdout: &log, Stderr: &log})
			t.Logf("Run = %v", err)
			te, ok := errors.AsType[*TargetError](err)
			if !ok || te.Target != tc.name {
				t.Fatalf("Run = %v, want a *TargetError of target %s\n%s", err, tc.name, log.String())
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Run = %v, want it to say %q", err, tc.says)
			}
			_, statErr := os.Stat(filepath.Join(out, "verdicts.json"))
			if written := statErr == nil; written != tc.evidence {
				t.Errorf("evidence written and audited: %v, want %v (%v)\n%s", written, tc.evidence, statErr, log.String())
			}
			if tc.evidence {
				b, err := os.ReadFile(filepath.Join(out, "targets.json"))
				if err != nil || !strings.Contains(string(b), "idemlab-no-such-program not found") {
					t.Errorf("targets.json does not say the target was skipped and why (%v):\n%s", err, b)
				}
			}
		})
	}
}

// Ensure runFault takes for the target's exactly what caserun marks as
// the target's own (a *caserun.TargetFault, however deeply wrapped), and
// leaves the lab's own failures the lab's.
func TestRunFault(t *testing.T) {
	tg := &target.Target{Name: "svc"}
	fault := &caserun.TargetFault{Err: errors.New("start target svc replica 0: server exited with code 2 before it was ready")}
	for _, tc := range []struct {
		err    error
		target bool
	}{
		{fmt.Errorf("case c on target svc: %w", fault), true},
		{fmt.Errorf("chaos on target svc: start replica 1: %w", fault), true},
		{errors.New("case c on target svc: start the effect sink: listen tcp 127.0.0.1:0: bind: address already in use"), false},
		{errors.New("case c on target svc: start target svc replica 0: server exited"), false}, // the text alone is no mark
		{fmt.Errorf("case c on target svc: %v", fault), false},                                 // nor a fault flattened to text
	} {
		_, got := errors.AsType[*TargetError](runFault(tg, tc.err))
		if got != tc.target {
			t.Errorf("runFault(%q): a *TargetError %v, want %v", tc.err, got, tc.target)
		}
	}
	if runFault(tg, nil) != nil {
		t.Error("runFault(nil) is not nil")
	}
}

package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/serverproc/proctest"
	"idemlab/internal/sink/sinktest"
	"idemlab/internal/target"
)

// killedChildEnv makes the test binary a runner of one case on the target
// folder it names, which the test kills with SIGKILL (its value).
const killedChildEnv = "RUNNER_TEST_KILLED_CHILD"

func runKilledChild(dir string) int {
	err := Run(context.Background(), Options{Root: "../..", Out: filepath.Join(os.TempDir(), "evidence"), Stores: protocol.Stores, Targets: []string{dir},
		Case: "keyed_lost_reply", Intents: DefaultIntents, Stdout: io.Discard, Stderr: os.Stderr})
	fmt.Fprintln(os.Stderr, "the runner the test meant to kill ended on its own:", err)
	return 1
}

// Ensure a runner killed with SIGKILL, when no code of its own runs, does
// not leave behind what its target started: the target starts its service
// under a shell (the `npm start` pattern: the parent-death signal reaches
// the shell only) after a daemon that left its process group (setsid).
// The runner's watchdog kills both by the runner's mark; the old runner
// left both running.
func TestRunnerKilledLeavesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the lab and kills a runner")
	}
	m := proctest.Marked(t)
	dir := sinktest.WriteTarget(t, sinktest.Service{Name: "daemonized"})
	wrapStart(t, dir, m)
	tmp := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), killedChildEnv+"="+dir, "TMPDIR="+tmp)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill() })
	// The daemon starts 2 s before the service is ready: the runner is
	// still waiting for it when it is killed.
	deadline := time.Now().Add(3 * time.Minute) // the build of the lab's server, cold
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	for len(proctest.Carrying(m)) < 2 {
		select {
		case err := <-exited:
			t.Fatalf("the runner ended (%v) before the target's daemon started", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the target's daemon never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	if left := proctest.Gone(m); len(left) > 0 {
		t.Errorf("processes %v the target started outlived the runner killed with SIGKILL", left)
	}
}

// wrapStart makes the target in dir start its service under a shell that
// first starts a daemon (setsid, its output closed) and waits 2 s; marker
// is in the arguments of both shells.
func wrapStart(t *testing.T, dir, marker string) {
	t.Helper()
	path := filepath.Join(dir, target.FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	start := doc["start"].(map[string]any)
	argv := start["argv"].([]any)
	script := `setsid sh -c 'while :; do sleep 1; done' "$0" >/dev/null 2>&1 </dev/null & sleep 2; shift; "$@"`
	start["argv"] = append([]any{"sh", "-c", script, marker, "-"}, argv...)
	if b, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

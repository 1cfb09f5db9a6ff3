package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
)

// The test binary doubles as a runner holding its temp folder until it is
// killed, chosen by this variable (its value is the parent folder).
const tempChildEnv = "RUNNER_TEST_TEMP_CHILD"

// Tests that check this binary's processes as a whole
// (sinktest.CheckNoneLeft) or set the environment run serially; the
// others call t.Parallel, and so run only once every serial test ended.
func TestMain(m *testing.M) {
	if sinktest.IsTarget() { // this binary as a target (chaos_test.go)
		os.Exit(sinktest.Serve())
	}
	if dir := os.Getenv(killedChildEnv); dir != "" { // a runner the test kills (watchdog_test.go)
		os.Exit(runKilledChild(dir))
	}
	if parent := os.Getenv(tempChildEnv); parent != "" {
		dir, _, release, err := makeTemp(parent)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("DIR %s\n", dir)
		time.Sleep(time.Minute)
		release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startHolder starts the test binary as a runner that holds a temp folder
// in parent, and returns it and the folder; it is killed when the test ends.
func startHolder(t *testing.T, parent string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), tempChildEnv+"="+parent)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	dir, ok := strings.CutPrefix(strings.TrimSpace(line), "DIR ")
	if err != nil || !ok {
		t.Fatalf("holder printed %q (%v), want DIR <folder>", line, err)
	}
	return cmd, dir
}

// Ensure a runner's start removes the temp folders of runners killed with
// SIGKILL, found by the lock in each, and keeps a live runner's folder, a
// folder without a lock file (by its name alone it could be anyone's) and
// anything that is not a folder; its own folder is gone when Run returns.
func TestRunSweepsDeadRunnersTemp(t *testing.T) {
	parent := t.TempDir()
	t.Setenv("TMPDIR", parent)
	killed, dead := startHolder(t, parent)
	_, live := startHolder(t, parent)
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	unlocked := filepath.Join(parent, tempPrefix+"nolock")
	if err := os.Mkdir(unlocked, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(parent, tempPrefix+"file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	var out strings.Builder
	err := Run(context.Background(), Options{Root: "../..", Out: filepath.Join(t.TempDir(), "evidence"), Stores: []protocol.Store{protocol.Volatile},
		Intents: DefaultIntents, Experiment: None, ServerPath: filepath.Join(parent, "no-such-server"), Stdout: &out, Stderr: &out})
	var usage *UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "-server") {
		t.Fatalf("Run = %v, want the usage error of a missing -server (after the sweep)\n%s", err, out.String())
	}
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed runner's %s: %v, want it removed", dead, err)
	}
	if !strings.Contains(out.String(), "removed 1 temp folders of runners that are gone: "+dead) {
		t.Errorf("Run did not say what it removed:\n%s", out.String())
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, filepath.Join(parent, e.Name()))
	}
	want := []string{file, unlocked, live}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left in %s: %v, want %v (the live runner's, the unlocked folder, the file; not Run's own)", parent, left, want)
	}
}

package serverproc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/serverproc/proctest"
)

// Ensure a runner killed outright (SIGKILL: no code of its own runs) takes
// with it what its server started: a child of the server's group, which
// the parent-death signal (the direct child's only) does not reach, and
// one that left the group (setsid). Its watchdog kills both by the
// runner's mark; without it both outlive the runner. One that also cleared
// its environment (env -i) the watchdog kills with the runner's cgroups
// where the lab makes them, and removes them, a cgroup made below the
// server's too; elsewhere it outlives the runner (proctest.UnmarkedOutcome).
func TestWatchdogEndsWhatADeadRunnerStarted(t *testing.T) {
	t.Parallel() // each owner has its own marks and cgroups, and is judged by them alone
	for _, unmarked := range []bool{false, true} {
		t.Run(fmt.Sprintf("unmarked=%v", unmarked), func(t *testing.T) {
			t.Parallel()
			left := false
			if unmarked {
				_, left = proctest.UnmarkedOutcome(t, Cgroups())
			}
			m := proctest.Marked(t)
			owner, ownerMark := startOwner(t, m, unmarked, os.Stderr)
			// The server's shell, its group child, the setsid child's shell.
			if n := len(proctest.Carrying(m)); n < 3 {
				t.Fatalf("%d processes carry the marker, want at least 3 before the kill", n)
			}
			ownCgroups := filepath.Join(Cgroups(), cgroupPrefix+ownerMark+".*")
			if cg, _ := filepath.Glob(ownCgroups); Cgroups() != "" && len(cg) == 0 {
				t.Fatalf("no cgroup %s before the kill", ownCgroups)
			}
			t.Cleanup(func() { // what the watchdog failed to remove is not left to the machine
				cg, _ := filepath.Glob(ownCgroups)
				for _, dir := range cg {
					removeCgroupDir(dir)
				}
			})
			if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			owner.Wait()
			switch gone := proctest.Gone(m); {
			case !left && len(gone) > 0:
				t.Errorf("processes %v outlived the runner killed with SIGKILL", gone)
			case left && len(gone) != 1:
				t.Errorf("processes %v outlived the runner killed with SIGKILL, want the one without the mark alone", gone)
			}
			if Cgroups() == "" {
				return
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				cg, _ := filepath.Glob(ownCgroups)
				if len(cg) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("cgroups %v of the dead runner left 5 s after its kill: want them removed", cg)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// startOwner starts this binary as a runner with its watchdog (the fake
// "owner") whose server leaves children carrying marker, unmarked: one of
// them clears its environment too; it returns the owner, once ready, and
// the owner's run mark. The owner is killed when the test ends.
func startOwner(t *testing.T, marker string, unmarked bool, stderr io.Writer) (*exec.Cmd, string) {
	t.Helper()
	owner := exec.Command(os.Args[0])
	owner.Env = append(os.Environ(), fakeEnv+"=owner", "FAKE_MARKER="+marker, "FAKE_FILE="+filepath.Join(t.TempDir(), "escaped"),
		fmt.Sprintf("FAKE_UNMARKED=%d", map[bool]int{false: 0, true: 1}[unmarked]))
	owner.Stderr = stderr
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Process.Kill(); owner.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	ownerMark, ok := strings.CutPrefix(strings.TrimSpace(line), "OWNER READY ")
	if !ok {
		t.Fatalf("the owner printed %q (%v), want OWNER READY and its mark", line, err)
	}
	return owner, ownerMark
}

// Ensure a runner that ends cleanly tells its watchdog so, and the
// watchdog kills nothing: what the runner still runs is its own to stop.
func TestWatchdogCloseKillsNothing(t *testing.T) {
	t.Parallel()
	wd, err := StartWatchdog()
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartSpec(t.Context(), Spec{Path: os.Args[0], Env: fakeEnviron("ready"), ReadyLine: readyLine, ReadyWithin: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	if err := wd.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := wd.Close(); err != nil {
		t.Fatalf("a second Close = %v", err)
	}
	time.Sleep(700 * time.Millisecond) // past the watchdog's three passes, had it swept
	if s.Exited() {
		t.Fatal("the server exited after the watchdog was closed cleanly")
	}
	if code, err := s.Stop(5 * time.Second); code != 0 || err != nil {
		t.Errorf("Stop = %d, %v; want 0, nil", code, err)
	}
}

// Ensure a dead runner's watchdog that cannot remove one of its cgroups
// says so on the runner's stderr, naming it, rather than leave it in
// silence: here a folder bind-mounted on a cgroup below the server's makes
// rmdir fail (EBUSY) for as long as the watchdog tries. The old watchdog
// exited 0 without a word.
func TestWatchdogSaysWhatItLeft(t *testing.T) {
	t.Parallel() // it judges only its owner's mark and cgroups; it waits out the watchdog's 5 s
	if Cgroups() == "" {
		t.Skip("no cgroups made here: the watchdog has none to remove")
	}
	m := proctest.Marked(t)
	var stderr bytes.Buffer // the watchdog's too: the owner's Wait returns once it exited
	owner, ownerMark := startOwner(t, m, false, &stderr)
	cg, _ := filepath.Glob(filepath.Join(Cgroups(), cgroupPrefix+ownerMark+".*"))
	if len(cg) != 1 {
		t.Fatalf("cgroups %v of the owner, want its server's alone", cg)
	}
	pinned := filepath.Join(cg[0], "pinned")
	if err := os.Mkdir(pinned, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupDir(cg[0]) })
	if err := syscall.Mount(t.TempDir(), pinned, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount a folder on a cgroup here (%v): no way to pin one", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(pinned, 0); err != nil {
			t.Errorf("unmount %s: %v", pinned, err)
		}
	})
	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	owner.Wait()
	if left := proctest.Gone(m); len(left) > 0 {
		t.Errorf("processes %v outlived the runner killed with SIGKILL", left)
	}
	want := "idemlab watchdog: the runner died and left cgroups it could not remove 5 s after their kill: " + cg[0] + " (remove each"
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("the runner's stderr:\n%s\nwant the watchdog's word on the cgroup it left: %q", stderr.String(), want)
	}
}

// Package proctest holds what tests of process handling share: a marker
// that tags a test's processes so that none outlives it, a wait for them
// to be gone, and a bound on a call that used to hang.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Marked returns a marker unique to the test, for a test process's
// arguments, and registers a cleanup that kills whatever still carries it
// (a process that escaped the code under test must not outlive the test).
func Marked(t *testing.T) string {
	t.Helper()
	m := fmt.Sprintf("idemlab-test-%d-%s", os.Getpid(), regexp.MustCompile(`\W`).ReplaceAllString(t.Name(), "-"))
	t.Cleanup(func() {
		for _, pid := range Carrying(m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return m
}

// Carrying lists the live processes (not zombies) with marker in their
// arguments.
func Carrying(marker string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join(d, "stat")); err == nil {
			if _, after, ok := bytes.Cut(stat, []byte(") ")); ok && bytes.HasPrefix(after, []byte("Z")) {
				continue
			}
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		pids = append(pids, pid)
	}
	return pids
}

// Gone waits until no live process carries marker (a liveness bound: the
// killed are reaped by whoever inherited them) and returns what is left.
func Gone(marker string) []int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := Carrying(marker)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Within runs f and fails the test if it does not return before limit, a
// hang detector (set limit far above any honest duration): the old code
// hung for good there, so the goroutine is left behind.
func Within[T any](t *testing.T, limit time.Duration, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
		panic("unreachable")
	}
}

// Escape starts, in a script run as sh -c script MARKER FILE, a child that
// leaves the process group (setsid) holding the output, and waits until
// it has.
const Escape = `setsid sh -c 'touch "$1"; while :; do sleep 1; done' "$0" "$1" & while [ ! -e "$1" ]; do sleep 0.05; done; `

// Daemon is Escape's child as a daemon: its output closed (to /dev/null),
// so nothing the lab reads waits on it.
const Daemon = `setsid sh -c 'touch "$1"; while :; do sleep 1; done' "$0" "$1" >/dev/null 2>&1 </dev/null & while [ ! -e "$1" ]; do sleep 0.05; done; `

// EscapeUnmarked is Escape's child with its environment cleared (env -i):
// beyond the lab's mark (serverproc.MarkEnv) as well as its group's kill.
const EscapeUnmarked = `env -i /usr/bin/setsid /bin/sh -c 'touch "$1"; while :; do sleep 1; done' "$0" "$1" & while [ ! -e "$1" ]; do sleep 0.05; done; `

// UnmarkedOutcome is what the lab says of EscapeUnmarked's child and
// whether the child is left alive, given serverproc.Cgroups() (passed in:
// serverproc's own tests use this package): where the lab makes cgroups,
// the cgroup's kill ends it; elsewhere it is beyond every kill and its
// output is not waited for. The test's log says which was checked.
func UnmarkedOutcome(t *testing.T, cgroups string) (want string, left bool) {
	t.Helper()
	if cgroups != "" {
		t.Logf("cgroups at hand (%s): a process without the mark is killed with its cgroup", cgroups)
		return "that cleared its environment outlived it; killed by its cgroup", false
	}
	t.Log("no cgroups at hand: a process without the mark outlives the kills")
	return "held its output open", true
}

package serverproc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// marked returns a marker unique to the test, and registers a cleanup that
// kills whatever still carries it (a process that escaped the code under
// test must not outlive the test either).
func marked(t *testing.T) string {
	t.Helper()
	m := fmt.Sprintf("idemlab-test-%d-%s", os.Getpid(), regexp.MustCompile(`\W`).ReplaceAllString(t.Name(), "-"))
	t.Cleanup(func() {
		for _, pid := range carrying(m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return m
}

// carrying lists the live processes (not zombies) with marker in their
// arguments.
func carrying(marker string) []int {
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

// gone waits until no live process carries marker, a liveness bound (the
// killed are reaped by whoever inherited them), and reports what is left.
func gone(marker string) []int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := carrying(marker)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// within runs f and fails the test if it does not return before limit:
// the old code hung for good here, so the goroutine is left behind.
func within[T any](t *testing.T, limit time.Duration, what string, f func() T) T {
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

// escape starts, in a script run as sh -c script MARKER FILE, a child that
// leaves the process group (setsid) holding stdout, and waits until it has.
const escape = `setsid sh -c 'touch "$1"; while :; do sleep 1; done' "$0" "$1" & while [ ! -e "$1" ]; do sleep 0.05; done; `

// Ensure a target whose children keep its stdout open after it is gone
// cannot hang the runner: Kill and AwaitExit return, a child in its group
// is killed and reported, and one that left the group (setsid) is not
// waited for.
func TestServerChildrenHoldingOutput(t *testing.T) {
	tests := []struct {
		name   string
		script string // run as sh -c script MARKER; prints the ready line
		exit   bool   // the server exits on its own (AwaitExit), or is killed (Kill)
		want   string // in AwaitExit's error
		left   bool   // a process escapes the group (setsid): not the code's to kill
	}{
		{name: "group child, server exits", script: `(while :; do sleep 1; done) & echo READY 127.0.0.1:4242; sleep 0.2`, exit: true, want: "outlived"},
		{name: "group child, server killed", script: `(while :; do sleep 1; done) & echo READY 127.0.0.1:4242; exec sleep 60`},
		{name: "setsid child, server killed", script: escape + `echo READY 127.0.0.1:4242; exec sleep 60`, left: true},
		{name: "setsid child, server exits", script: escape + `echo READY 127.0.0.1:4242; sleep 0.2`, exit: true, want: "outside its process group (setsid)", left: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := marked(t)
			s, err := StartSpec(t.Context(), Spec{Path: "sh", Args: []string{"-c", tt.script, m, filepath.Join(t.TempDir(), "escaped")}, ReadyLine: readyLine, ReadyWithin: 10 * time.Second, Group: true})
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			if tt.exit {
				err := within(t, 20*time.Second, "AwaitExit", func() error { _, err := s.AwaitExit(20 * time.Second); return err })
				t.Logf("AwaitExit returned in %v: %v", time.Since(began).Round(time.Millisecond), err)
				if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
					t.Errorf("AwaitExit = %v, want an error saying %q", err, tt.want)
				}
				if err != nil && strings.Contains(err.Error(), "did not exit") {
					t.Errorf("AwaitExit = %v: the server had exited at once", err)
				}
			}
			began = time.Now()
			within(t, 20*time.Second, "Kill", func() struct{} { s.Kill(); return struct{}{} })
			t.Logf("Kill returned in %v", time.Since(began).Round(time.Millisecond))
			if !tt.left {
				if left := gone(m); len(left) > 0 {
					t.Errorf("processes %v of the server's group outlived Kill", left)
				}
			}
		})
	}
}

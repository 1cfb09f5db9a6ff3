package serverproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as a fake server, chosen by this variable.
const fakeEnv = "SERVERPROC_FAKE"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeEnv) {
	case "":
		os.Exit(m.Run())
	case "silent": // never becomes ready
		fmt.Fprintln(os.Stderr, "fake: starting slowly")
		time.Sleep(time.Minute)
		os.Exit(0)
	case "ready": // ready, then a graceful exit on SIGTERM
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Println("READY 127.0.0.1:4242")
		fmt.Fprintln(os.Stderr, "fake: serving")
		<-sig
		fmt.Fprintln(os.Stderr, "fake: bye")
		os.Exit(0)
	case "deaf": // ready, ignores SIGTERM
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("READY 127.0.0.1:4242")
		time.Sleep(time.Minute)
		os.Exit(0)
	case "crash": // ready, then exits 23 on its own
		fmt.Println("READY 127.0.0.1:4242")
		time.Sleep(20 * time.Millisecond)
		os.Exit(23)
	case "fail": // exits before ready
		fmt.Fprintln(os.Stderr, "fake: bad flag")
		os.Exit(2)
	}
	os.Exit(99)
}

func start(t *testing.T, mode string, readyWithin time.Duration) (*Server, error) {
	t.Helper()
	t.Setenv(fakeEnv, mode)
	s, err := Start(context.Background(), os.Args[0], nil, readyWithin)
	if s != nil {
		t.Cleanup(s.Kill)
	}
	return s, err
}

// alive reports whether pid names a process (a zombie counts as alive).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// Ensure a server that never prints READY is killed and reaped before Start
// returns: no child of this test process is left, not even a zombie.
func TestStartNeverReadyReapsChild(t *testing.T) {
	t.Setenv(fakeEnv, "silent")
	ctx := context.Background()
	before := children(t)
	_, err := Start(ctx, os.Args[0], nil, 200*time.Millisecond)
	if err == nil {
		t.Fatal("Start = nil error, want a READY timeout")
	}
	if !strings.Contains(err.Error(), "no READY line") || !strings.Contains(err.Error(), "fake: starting slowly") {
		t.Fatalf("Start error = %q, want it to name the missing READY line and show the log", err)
	}
	if after := children(t); len(after) > len(before) {
		t.Fatalf("children after failed start = %v, before = %v", after, before)
	}
}

// children lists the PIDs whose parent is this process, from /proc.
func children(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/children", os.Getpid()))
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no /proc children list on this system")
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func TestStartStop(t *testing.T) {
	s, err := start(t, "ready", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Addr, "127.0.0.1:4242"; got != want {
		t.Fatalf("Addr = %q, want %q", got, want)
	}
	code, err := s.Stop(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("Stop = %d, want 0", code)
	}
	if alive(s.PID) {
		t.Fatalf("pid %d still alive after Stop", s.PID)
	}
	if got := strings.Join(s.Log(), "\n"); !strings.Contains(got, "fake: bye") {
		t.Fatalf("Log = %q, want the shutdown line", got)
	}
}

// Ensure a server that ignores SIGTERM is killed after the grace period and
// the caller is told.
func TestStopKillsDeafServer(t *testing.T) {
	s, err := start(t, "deaf", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	code, err := s.Stop(200 * time.Millisecond)
	if err == nil {
		t.Fatal("Stop = nil error, want a kill report")
	}
	if code != -1 {
		t.Fatalf("Stop code = %d, want -1 (killed)", code)
	}
	if alive(s.PID) {
		t.Fatalf("pid %d still alive", s.PID)
	}
}

func TestAwaitExitSeesCrashCode(t *testing.T) {
	s, err := start(t, "crash", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	code, err := s.AwaitExit(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 23 {
		t.Fatalf("AwaitExit = %d, want 23", code)
	}
	// Stopping an exited server is harmless and keeps the code.
	if code, err := s.Stop(time.Second); err != nil || code != 23 {
		t.Fatalf("Stop after exit = %d, %v; want 23, nil", code, err)
	}
}

func TestStartReportsEarlyExit(t *testing.T) {
	_, err := start(t, "fail", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited with code 2") || !strings.Contains(err.Error(), "fake: bad flag") {
		t.Fatalf("Start error = %v, want the exit code and the log", err)
	}
}

package main

// Tests of what a hostile or careless user can do to a server: state
// folders it must refuse, a second server on a folder, clients that stall.

import (
	"strings"
	"testing"
)

// exits2 checks that s exited 2 with one line on stderr holding every want.
func exits2(t *testing.T, s *server, want ...string) {
	t.Helper()
	if got := s.wait(); got != 2 {
		t.Fatalf("exit status = %d, want 2; stderr:\n%s", got, s.stderr)
	}
	<-s.copied
	got := s.stderr.String()
	if strings.Count(got, "\n") != 1 {
		t.Errorf("stderr = %q, want one line", got)
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("stderr = %q, want it to say %q", got, w)
		}
	}
	if got := s.stdout.String(); got != "" {
		t.Errorf("stdout = %q, want nothing", got)
	}
}

// Ensure a second volatile server on a folder in use exits 2 naming the
// folder, and that the folder is free again once the first is killed -9
// (the kernel drops the lock with the process).
func TestVolatileFolderLocked(t *testing.T) {
	dir := t.TempDir()
	first := startServer(t, true, "-state", dir)
	if status, body, _ := first.post("k", ""); status != 200 || body != "1" {
		t.Fatalf("POST = %d %q, want 200 1", status, body)
	}
	exits2(t, startServer(t, false, "-state", dir), dir, "another server holds it")
	first.cmd.Process.Kill()
	first.wait()
	third := startServer(t, true, "-state", dir)
	if status, body, _ := third.post("k2", ""); status != 200 || body != "2" {
		t.Fatalf("POST after the restart = %d %q, want 200 2", status, body)
	}
	if got := third.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, third.stderr)
	}
}

package serverproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure a cgroup that cannot be removed is an error naming it, not a
// silence: a folder rmdir refuses (here one holding a file, as no cgroup
// can) is reported at once, and a folder already gone is not an error.
// Run and a server's Wait pass this error on (run.go, sweepGroup).
func TestCgroupRemoveSaysWhatWasLeft(t *testing.T) {
	dir := t.TempDir()
	busy := filepath.Join(dir, "idemlab-x.1")
	if err := os.Mkdir(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(busy, "held"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cg := &cgroup{dir: busy, fd: -1}
	if err := cg.remove(); err == nil || !strings.Contains(err.Error(), "remove cgroup "+busy) {
		t.Errorf("remove(a folder rmdir refuses) = %v, want an error naming %s", err, busy)
	}
	gone := &cgroup{dir: filepath.Join(dir, "idemlab-x.2"), fd: -1}
	if err := gone.remove(); err != nil {
		t.Errorf("remove(a folder already gone) = %v, want nil", err)
	}
	s := &Server{PID: 42, cgLeft: (&cgroup{dir: busy, fd: -1}).remove()}
	if err := s.sweepGroup(); err == nil || !strings.Contains(err.Error(), "server 42 exited, but its cgroup was left: remove cgroup "+busy) {
		t.Errorf("sweepGroup() with its cgroup left = %v", err)
	}
}

// path is cg's folder ("" for none), for a test to make a cgroup below it.
func (cg *cgroup) path() string {
	if cg == nil {
		return ""
	}
	return cg.dir
}

// removeCgroupDir removes the cgroup dir as remove does: what a test's
// run left, found by name.
func removeCgroupDir(dir string) error { return (&cgroup{dir: dir, fd: -1}).remove() }

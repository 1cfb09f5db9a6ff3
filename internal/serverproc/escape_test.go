package serverproc

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idemlab/internal/serverproc/proctest"
)

// Ensure a target whose children keep its stdout open after it is gone
// cannot hang the runner: Kill and AwaitExit return, a child in its group
// is killed and reported, one that left the group (setsid) is killed by
// the server's mark and reported, and one that also cleared its
// environment (beyond every kill) is not waited for.
func TestServerChildrenHoldingOutput(t *testing.T) {
	tests := []struct {
		name   string
		script string // run as sh -c script MARKER; prints the ready line
		exit   bool   // the server exits on its own (AwaitExit), or is killed (Kill)
		want   string // in AwaitExit's error
		left   bool   // a process escapes the group and the mark: not the code's to kill
	}{
		{name: "group child, server exits", script: `(while :; do sleep 1; done) & echo READY 127.0.0.1:4242; sleep 0.2`, exit: true, want: "outlived"},
		{name: "group child, server killed", script: `(while :; do sleep 1; done) & echo READY 127.0.0.1:4242; exec sleep 60`},
		{name: "setsid child, server killed", script: proctest.Escape + `echo READY 127.0.0.1:4242; exec sleep 60`},
		{name: "setsid child, server exits", script: proctest.Escape + `echo READY 127.0.0.1:4242; sleep 0.2`, exit: true, want: "outside its process group (setsid) outlived it: pid "},
		{name: "setsid daemon, its output closed", script: proctest.Daemon + `echo READY 127.0.0.1:4242; sleep 0.2`, exit: true, want: "done idemlab-test-"},
		{name: "setsid child without the mark, server exits", script: proctest.EscapeUnmarked + `echo READY 127.0.0.1:4242; sleep 0.2`, exit: true},
	}
	unmarked := &tests[len(tests)-1]
	unmarked.want, unmarked.left = proctest.UnmarkedOutcome(t, Cgroups())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each judges only the processes of its own mark
			m := proctest.Marked(t)
			s, err := StartSpec(t.Context(), Spec{Path: "sh", Args: []string{"-c", tt.script, m, filepath.Join(t.TempDir(), "escaped")}, ReadyLine: readyLine, ReadyWithin: 10 * time.Second, Group: true})
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			if tt.exit {
				err := proctest.Within(t, 20*time.Second, "AwaitExit", func() error { _, err := s.AwaitExit(20 * time.Second); return err })
				t.Logf("AwaitExit returned in %v: %v", time.Since(began).Round(time.Millisecond), err)
				if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
					t.Errorf("AwaitExit = %v, want an error saying %q", err, tt.want)
				}
				if err != nil && strings.Contains(err.Error(), "did not exit") {
					t.Errorf("AwaitExit = %v: the server had exited at once", err)
				}
			}
			began = time.Now()
			proctest.Within(t, 20*time.Second, "Kill", func() struct{} { s.Kill(); return struct{}{} })
			t.Logf("Kill returned in %v", time.Since(began).Round(time.Millisecond))
			if !tt.left {
				if left := proctest.Gone(m); len(left) > 0 {
					t.Errorf("processes %v of the server's group outlived Kill", left)
				}
			}
		})
	}
}

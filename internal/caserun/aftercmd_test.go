package caserun

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idemlab/internal/target"

	"idemlab/internal/serverproc"
	"idemlab/internal/serverproc/proctest"
)

// Ensure a count command returns promptly whatever its children do with
// its stdout, and once its context ends; its process group does not
// outlive it; what it prints is bounded while it is read, and a count must
// be a non-negative integer. The old code hung for good on a child holding
// stdout (its 30 s limit killed only the shell) and kept 100 MB of output.
func TestCountCommandBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  string        // run as sh -c script MARKER FILE
		cancel  time.Duration // cancel the context this long after the start (0: never)
		want    int64
		wantErr string // "" for success
		left    bool   // a process escapes the group (setsid) and the mark (env -i)
	}{
		{name: "group child holds stdout", script: `(while :; do sleep 1; done) & echo 2`, want: 2},
		{name: "cancelled, a group child holds stdout", script: `(while :; do sleep 1; done) & sleep 60`, cancel: 500 * time.Millisecond, wantErr: "context canceled"},
		{name: "setsid child holds stdout", script: proctest.Escape + `echo 2`, wantErr: "; killed by the command's mark"},
		{name: "100 MB", script: `head -c 104857600 /dev/zero | tr '\0' 7`, wantErr: "printed more than 4096 bytes on stdout"},
		{name: "negative", script: `echo -5`, wantErr: `printed "-5": a negative count`},
		{name: "not a number", script: `echo five`, wantErr: `printed "five", want one integer`},
		{name: "setsid child without the mark holds stdout", script: proctest.EscapeUnmarked + `echo 2`},
	}
	unmarked := &tests[len(tests)-1]
	unmarked.wantErr, unmarked.left = proctest.UnmarkedOutcome(t, serverproc.Cgroups())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := proctest.Marked(t)
			tr := &TargetReplicas{t: &target.Target{Name: "tiny", Dir: t.TempDir(),
				Effects: target.Effects{Count: []string{"sh", "-c", tt.script, m, filepath.Join(t.TempDir(), "escaped")}}}}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			run := ctx
			if tt.cancel > 0 {
				var stop context.CancelFunc
				run, stop = context.WithCancel(ctx)
				time.AfterFunc(tt.cancel, stop)
			}
			type result struct {
				n   int64
				err error
			}
			done := make(chan result, 1)
			began := time.Now()
			go func() { n, err := tr.countEffects(run); done <- result{n, err} }()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("countEffects did not return within 30 s")
			}
			t.Logf("returned in %v: %d, %.200v", time.Since(began).Round(time.Millisecond), r.n, r.err)
			if ctx.Err() != nil {
				t.Errorf("countEffects returned after the test's 20 s deadline")
			}
			switch {
			case tt.wantErr == "" && (r.err != nil || r.n != tt.want):
				t.Errorf("countEffects = %d, %v; want %d", r.n, r.err, tt.want)
			case tt.wantErr != "" && (r.err == nil || !strings.Contains(r.err.Error(), tt.wantErr)):
				t.Errorf("countEffects = %d, %.300v; want an error saying %q", r.n, r.err, tt.wantErr)
			}
			if r.err != nil && len(r.err.Error()) > 8192 {
				t.Errorf("the error is %d bytes, want at most 8192", len(r.err.Error()))
			}
			if !tt.left {
				if left := proctest.Gone(m); len(left) > 0 {
					t.Errorf("processes %v of the count command outlived it", left)
				}
			}
		})
	}
}

// Ensure a journal command's output is bounded while it is read: past the
// bound it is killed and the error names the command and the bound.
func TestJournalCommandBounded(t *testing.T) {
	t.Parallel()
	tr := &TargetReplicas{t: &target.Target{Name: "tiny", Dir: t.TempDir(),
		Effects: target.Effects{Journal: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero", maxJournalBytes+1)}}}}
	_, err := tr.ReadJournal(context.Background())
	want := fmt.Sprintf("read the journal (sh -c head -c %d /dev/zero): printed more than %d bytes on stdout", maxJournalBytes+1, maxJournalBytes)
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("ReadJournal = %.300v, want %q", err, want)
	}
}

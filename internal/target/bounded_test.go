package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"idemlab/internal/serverproc"
	"idemlab/internal/serverproc/proctest"
)

// Ensure a setup whose children keep its output open returns once its own
// shell exits, or once its context ends, well inside a deadline the old
// code hung past (it waited for the pipe to close, up to the 10-minute
// limit); a child in the setup's process group is killed; one that left
// the group is killed by the setup's mark, and the setup says so; one that
// also cleared its environment is not waited for, and the setup says so.
func TestEnsureSetupChildrenHoldingOutput(t *testing.T) {
	tests := []struct {
		name    string
		script  string        // run as sh -c script MARKER FILE
		cancel  time.Duration // cancel the context this long after the start (0: never)
		wantErr string        // "" for success
		left    bool          // a process escapes the group and the mark: not the runner's to kill
	}{
		{name: "group child outlives the shell", script: `(while :; do sleep 1; done) & echo hi`},
		{name: "cancelled with a group child", script: `(while :; do sleep 1; done) & echo hi; sleep 60`, cancel: 500 * time.Millisecond, wantErr: "context canceled"},
		{name: "setsid child outlives the shell", script: proctest.Escape + `echo hi`, wantErr: "while :; do sleep 1; done"}, // the error names the escaped loop
		{name: "cancelled with a setsid child", script: proctest.Escape + `echo hi; sleep 60`, cancel: 500 * time.Millisecond, wantErr: "context canceled"},
		{name: "setsid child without the mark outlives the shell", script: proctest.EscapeUnmarked + `echo hi`},
	}
	unmarked := &tests[len(tests)-1]
	unmarked.wantErr, unmarked.left = proctest.UnmarkedOutcome(t, serverproc.Cgroups())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("XDG_CACHE_HOME", t.TempDir())
			m := proctest.Marked(t)
			tg := loadMinimal(t, nil)
			tg.Setup = []string{"sh", "-c", tt.script, m, filepath.Join(t.TempDir(), "escaped")}
			// The deadline the old code hung past; the new returns well before.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			run := ctx
			if tt.cancel > 0 {
				var stop context.CancelFunc
				run, stop = context.WithCancel(ctx)
				time.AfterFunc(tt.cancel, stop)
			}
			began := time.Now()
			err := proctest.Within(t, 30*time.Second, "EnsureSetup", func() error { return tg.EnsureSetup(run, "digest", &bytes.Buffer{}) })
			took := time.Since(began)
			if ctx.Err() != nil {
				t.Fatalf("EnsureSetup returned after the test's 20 s deadline (%v): %v", took, err)
			}
			t.Logf("returned in %v: %v", took.Round(time.Millisecond), err)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("EnsureSetup = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("EnsureSetup = %v, want an error saying %q", err, tt.wantErr)
			}
			if !tt.left {
				if left := proctest.Gone(m); len(left) > 0 {
					t.Errorf("processes %v of the setup outlived it", left)
				}
			}
		})
	}
}

// Ensure a setup that prints 100 MB keeps only the tail of it: its error
// holds at most the tail and says how much more it printed, and what the
// runner allocated while it ran is far below what it printed.
func TestEnsureSetupOutputTail(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tg := loadMinimal(t, nil)
	const printed = 100 << 20
	tg.Setup = []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x; echo; echo the last words; exit 3", printed)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := tg.EnsureSetup(context.Background(), "digest", &bytes.Buffer{})
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("EnsureSetup = nil, want the failure")
	}
	msg := err.Error()
	if !strings.Contains(msg, "the last words") || !strings.Contains(msg, "exit status 3") {
		t.Errorf("EnsureSetup = %.300s..., want the exit status and the last words", msg)
	}
	if len(msg) > 8192 {
		t.Errorf("the error is %d bytes, want at most 8192", len(msg))
	}
	if !regexp.MustCompile(`\d{8,9} bytes before`).MatchString(msg) {
		t.Errorf("EnsureSetup = %.300s..., want it to say how many bytes were not kept", msg)
	}
	t.Logf("error (%d bytes): %.160s ... %s", len(msg), msg, msg[max(0, len(msg)-80):])
	t.Logf("allocated while setup printed %d MB: %.1f MB", printed>>20, float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("the runner allocated %d MB while setup printed %d MB, want under 32", alloc>>20, printed>>20)
	}
}

// Ensure setup and versions.runtime see none of the runner's environment
// beyond the documented minimum, and what target.json's start.env names
// without a run's placeholder.
func TestCommandsEnvironment(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("MY_SECRET_TOKEN", "tok-123")
	t.Setenv("GOFLAGS", "-buildvcs=false")
	tg := loadMinimal(t, nil)
	tg.Start.Env["LAMBDA_TIMEOUT_MS"] = "30000"
	const script = `echo "token=[$MY_SECRET_TOKEN] goflags=[$GOFLAGS] lambda=[$LAMBDA_TIMEOUT_MS] effect=[$EFFECT_URL]"`
	const want = "token=[] goflags=[-buildvcs=false] lambda=[30000] effect=[]"

	tg.Setup = []string{"sh", "-c", script + "; exit 1"}
	err := tg.EnsureSetup(context.Background(), "digest", &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("setup printed %v, want %q", err, want)
	}
	tg.Versions.Runtime = []string{"sh", "-c", script}
	if got, err := tg.RuntimeVersion(context.Background()); got != want {
		t.Errorf("versions.runtime printed %q (%v), want %q", got, err, want)
	}
}

// Ensure a runtime version command that hangs on a child holding its
// stdout returns once it exits.
func TestRuntimeVersionChildHoldingOutput(t *testing.T) {
	m := proctest.Marked(t)
	tg := loadMinimal(t, nil)
	tg.Versions.Runtime = []string{"sh", "-c", `(while :; do sleep 1; done) & echo v1.2.3`, m}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		v   string
		err error
	}
	r := proctest.Within(t, 30*time.Second, "RuntimeVersion", func() result { v, err := tg.RuntimeVersion(ctx); return result{v, err} })
	got, err := r.v, r.err
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || got != "v1.2.3" {
		t.Errorf("RuntimeVersion = %q, %v (context: %v), want v1.2.3 before the test's deadline", got, err, ctx.Err())
	}
	if left := proctest.Gone(m); len(left) > 0 {
		t.Errorf("processes %v outlived the version command", left)
	}
}

// Ensure a shipped Go target's commands, and a Go zoo service's, start
// no daemon of the go command's own: on a machine whose telemetry has not
// uploaded for a day (here a fresh XDG_CONFIG_HOME, so a fresh telemetry
// folder), the go command starts its telemetry sidecar with setsid, and
// the lab would kill it and refuse the target as one that left a process
// behind (a CI run failed so). The target's start.env tells the go
// command it is that sidecar's own child, which starts none.
func TestGoTargetsStartNoTelemetrySidecar(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "*", "*", FileName))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, p := range dirs {
		tg, err := Load(filepath.Dir(p), schemas(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(tg.Versions.Runtime) == 0 || tg.Versions.Runtime[0] != "go" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			if _, err := tg.RuntimeVersion(context.Background()); err != nil {
				t.Error(err)
			}
		})
		ran++
	}
	if ran < 8 {
		t.Errorf("%d shipped targets and zoo services run go for their runtime version, want the 2 Fiber ones and the 6 Go zoo services", ran)
	}
}

package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/audit/strict"
	"idemlab/internal/target"
)

// setupTarget writes a target whose setup is the shell script script, run
// in its folder, and loads it.
func setupTarget(t *testing.T, name, script string) *target.Target {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	doc := `{
  "name": "` + name + `",
  "summary": "a target whose setup the test controls",
  "setup": ["sh", "-c", ` + strconv.Quote(script) + `],
  "start": {"argv": ["./service"], "env": {"PORT": "{port}", "EFFECT_URL": "{effect_url}"}, "ready": {"tcp": true}},
  "request": {"method": "POST", "path": "/pay", "key_header": "Idempotency-Key"},
  "replay": {"header": "X-Replayed", "value": "yes"},
  "effects": "sink",
  "claims": {"durable": false, "shared_store": false, "capacity": null, "max_body": null}
}
`
	if err := os.WriteFile(filepath.Join(dir, target.FileName), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	schemas, err := strict.LoadSchemas(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := target.Load(dir, schemas)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// Ensure a setup still running when the run ends is killed and waited for
// by stop (no npm outlives the runner), and waiting for it then returns an
// error, not a setup that looks done.
func TestBackgroundStopEndsSetup(t *testing.T) {
	tg := setupTarget(t, "slow-setup", "echo $$ > started; exec sleep 60")
	bg := newBackground(context.Background())
	defer bg.stop()
	s, err := startSetups(bg, []*target.Target{tg}, false, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(tg.Dir, "started")
	var pid int
	for range 500 { // the setup's shell says its pid; a liveness bound, not a speed check
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatal("the setup never started")
	}
	bg.stop()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the setup's process %d after stop: kill -0 = %v, want ESRCH (gone)", pid, err)
	}
	digest, err := tg.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ensure(context.Background(), tg, digest, &bytes.Buffer{}); err == nil {
		t.Error("ensure after stop = nil, want the setup's error (it was killed)")
	}
	if _, err := os.Stat(filepath.Join(tg.Dir, target.SetupMarker)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed setup left its marker (stat: %v): the next run would skip it", err)
	}
}

// Ensure a setup that fails in the background is the error of the run that
// waits for it (for all, or for its target), with the target's name and
// the setup's own words; and a target whose setup was not started in the
// background is set up when it is needed.
func TestSetupErrorsAndFallback(t *testing.T) {
	failing := setupTarget(t, "failing-setup", "echo boom >&2; exit 3")
	fine := setupTarget(t, "fine-setup", "echo ok")
	bg := newBackground(context.Background())
	defer bg.stop()
	s, err := startSetups(bg, []*target.Target{failing}, false, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	const boom = "target failing-setup: setup sh -c echo boom >&2; exit 3: exit status 3: boom"
	if err := s.waitAll(context.Background(), []*target.Target{fine, failing}); err == nil || err.Error() != boom {
		t.Errorf("waitAll = %v, want %q (the one started, failing)", err, boom)
	}
	for _, tc := range []struct {
		tg   *target.Target
		want string // "" for no error
	}{
		{failing, boom},
		{fine, ""},
	} {
		digest, err := tc.tg.Digest()
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		err = s.ensure(context.Background(), tc.tg, digest, &log)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: ensure = %v, want nil", tc.tg.Name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: ensure = %v, want %q", tc.tg.Name, err, tc.want)
		}
		if tc.want == "" && !strings.Contains(log.String(), "target fine-setup: setup done") {
			t.Errorf("%s: the setup run when needed did not say so: %q", tc.tg.Name, log.String())
		}
	}
}

// Ensure waiting for a background result gives up when the waiter's
// context ends first.
func TestLaterWaitGivesUp(t *testing.T) {
	bg := newBackground(context.Background())
	defer bg.stop()
	release := make(chan struct{})
	wait := start(bg, func(ctx context.Context) (int, error) {
		select {
		case <-release:
			return 7, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("wait with an ended context = %v, want context.Canceled", err)
	}
	close(release)
	if v, err := wait(context.Background()); v != 7 || err != nil {
		t.Errorf("wait = %d, %v, want 7, nil", v, err)
	}
}

// Ensure a runner whose target's setup another runner holds the lock of
// says so, in one line naming the target and the lock, and stops waiting
// when its run is stopped (the old code waited in flock for good, silent).
func TestSetupLockWaitSaysSoAndStops(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	tg := setupTarget(t, "locked-setup", "echo ran > ran")
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(tg.Dir))
	lockPath := filepath.Join(cache, "idemlab", "setup", hex.EncodeToString(sum[:16])+".lock")
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o755); err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close() // releases the lock, so a hung old setup can end
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	bg := newBackground(context.Background())
	var log syncBuffer
	s, err := startSetups(bg, []*target.Target{tg}, false, &log)
	if err != nil {
		t.Fatal(err)
	}
	want := "waiting for another runner's setup of locked-setup (lock " + lockPath + ")\n"
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(log.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s waiting on the lock the log is %q, want a line %q", log.String(), want)
		}
	}
	stopped := make(chan struct{})
	go func() { bg.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("stop did not end the wait on the lock within 20 s")
	}
	if err := s.waitAll(context.Background(), []*target.Target{tg}); !errors.Is(err, context.Canceled) {
		t.Errorf("waitAll after stop = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(tg.Dir, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the setup ran while another runner held its lock (stat: %v)", err)
	}
	if n := strings.Count(log.String(), "waiting for"); n != 1 {
		t.Errorf("the log says %d times that it waits, want once: %q", n, log.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the background's writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

package target

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// requireRedis skips where redis-server is missing, unless the targets
// must run (IDEMLAB_REQUIRE_TARGETS=1, as in CI).
func requireRedis(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(RedisProgram); err != nil {
		if os.Getenv("IDEMLAB_REQUIRE_TARGETS") == "1" {
			t.Fatalf("%v (%s)", err, RedisHint)
		}
		t.Skipf("redis tests skipped (%s; IDEMLAB_REQUIRE_TARGETS=1 makes this a failure): %v", RedisHint, err)
	}
}

// Ensure a started redis answers on loopback, and Stop leaves no process
// and no folder behind.
func TestRedisStartStop(t *testing.T) {
	requireRedis(t)
	r, err := StartRedis(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	c, err := net.DialTimeout("tcp", r.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || strings.TrimSpace(line) != "+PONG" {
		t.Fatalf("PING = %q, %v, want +PONG", line, err)
	}
	if !strings.HasPrefix(r.URL, "redis://127.0.0.1:") {
		t.Fatalf("URL = %q, want a loopback redis URL", r.URL)
	}
	pid, dir := r.srv.PID, r.dir
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("redis pid %d after Stop: kill(0) = %v, want ESRCH", pid, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("redis folder after Stop: %v, want it removed", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("second Stop = %v, want nil", err)
	}
}

// Ensure a redis whose port another process took between FreePort and its
// bind is not taken for ready: it exits, and startRedisOnce says so (a
// TCP probe, the old readiness, reached the other process's listener and
// the run talked to it, or got ECONNREFUSED once redis had exited).
func TestRedisPortTaken(t *testing.T) {
	requireRedis(t)
	path, err := exec.LookPath(RedisProgram)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // the other process: it accepts what reaches it
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	r, err := startRedisOnce(context.Background(), path, t.TempDir(), port)
	if err == nil {
		r.Stop()
		t.Fatalf("redis on the taken port %d started: want its failure to bind", port)
	}
	if !strings.Contains(err.Error(), "exited") {
		t.Errorf("startRedisOnce on a taken port = %v, want it to say redis exited", err)
	}
}

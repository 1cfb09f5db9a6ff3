package serverproc

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/serverproc/proctest"
)

// The test binary doubles as a fake server, chosen by this variable.
const fakeEnv = "SERVERPROC_FAKE"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeEnv) {
	case "":
		// Up to 8 parallel tests at once unless -parallel gives another
		// number: they wait on fakes and watchdogs, using little CPU.
		flag.Parse()
		if f := flag.Lookup("test.parallel"); f.Value.String() == f.DefValue {
			f.Value.Set("8")
		}
		os.Exit(m.Run())
	case "silent": // never becomes ready
		fmt.Fprintf(os.Stderr, "fake: starting slowly, pid %d\n", os.Getpid())
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
	case "port": // a target's own ready line, naming only its port
		fmt.Println("starting")
		fmt.Println("listening on 4243")
		time.Sleep(time.Minute)
		os.Exit(0)
	case "listen": // ready when it accepts connections on FAKE_ADDR; HTTP 503 until FAKE_SICK_MS passed
		ln, err := net.Listen("tcp", os.Getenv("FAKE_ADDR"))
		if err != nil {
			os.Exit(3)
		}
		sick, _ := strconv.Atoi(os.Getenv("FAKE_SICK_MS"))
		began := time.Now()
		http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if time.Since(began) < time.Duration(sick)*time.Millisecond {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		os.Exit(0)
	case "owner": // a runner with its watchdog: its server leaves a child in its group and one outside (setsid)
		wd, err := StartWatchdog()
		if err != nil {
			os.Exit(3)
		}
		defer wd.Close()
		script := `(while :; do sleep 1; done) & ` + proctest.Escape + `echo READY 127.0.0.1:4242; wait`
		if os.Getenv("FAKE_UNMARKED") == "1" { // the child outside the group clears its environment too
			script = `(while :; do sleep 1; done) & ` + proctest.EscapeUnmarked + `echo READY 127.0.0.1:4242; wait`
		}
		s, err := StartSpec(context.Background(), Spec{Path: "sh", Args: []string{"-c", script, os.Getenv("FAKE_MARKER"), os.Getenv("FAKE_FILE")},
			ReadyLine: readyLine, ReadyWithin: 10 * time.Second, Group: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		defer s.Kill()
		if s.cg.path() != "" && os.Getenv("FAKE_UNMARKED") == "1" { // a cgroup below the server's, as a runner run as a target makes
			if err := os.Mkdir(filepath.Join(s.cg.path(), "nested"), 0o755); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
		}
		fmt.Println("OWNER READY", runMark)
		time.Sleep(time.Minute)
		os.Exit(0)
	case "parent": // ready, with a child of its own that ignores SIGTERM
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), fakeEnv+"=deaf")
		out, _ := child.StdoutPipe()
		if err := child.Start(); err != nil {
			os.Exit(3)
		}
		bufio.NewReader(out).ReadString('\n') // the child ignores SIGTERM from here on
		fmt.Printf("READY 127.0.0.1:4242 child %d\n", child.Process.Pid)
		child.Wait()
		os.Exit(0)
	}
	os.Exit(99)
}

// start starts this binary as the fake server of mode, as Start does.
func start(t *testing.T, mode string, readyWithin time.Duration) (*Server, error) {
	t.Helper()
	s, err := StartSpec(context.Background(), Spec{Path: os.Args[0], Env: fakeEnviron(mode), ReadyLine: readyLine, ReadyWithin: readyWithin})
	if s != nil {
		t.Cleanup(s.Kill)
	}
	return s, err
}

// fakeEnviron is this process's environment choosing the fake's mode: the
// tests that start fakes run in parallel, so none sets it on the process.
func fakeEnviron(mode string) []string { return append(os.Environ(), fakeEnv+"="+mode) }

// Ensure a target's own ready line names its port, and the lines before it
// are kept as log.
func TestStartSpecReadyLinePort(t *testing.T) {
	t.Parallel()
	s, err := StartSpec(context.Background(), Spec{Path: os.Args[0], Env: fakeEnviron("port"), ReadyLine: regexp.MustCompile(`^listening on (\d+)$`), ReadyWithin: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	if got, want := s.Addr, "127.0.0.1:4243"; got != want {
		t.Fatalf("Addr = %q, want %q", got, want)
	}
	if got := strings.Join(s.Log(), "\n"); !strings.Contains(got, "stdout: starting") {
		t.Fatalf("Log = %q, want the line before the ready line", got)
	}
}

// Ensure readiness by a TCP connection or an HTTP answer below 500 waits
// for the server, and a server that never gets ready is killed.
func TestStartSpecProbes(t *testing.T) {
	t.Parallel()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	for _, tc := range []struct {
		name, http, sick string
		within           time.Duration
		ok               bool
	}{
		{"tcp", "", "0", 10 * time.Second, true},
		{"http after 503s", "/health", "300", 10 * time.Second, true},
		{"http never healthy", "/health", "60000", 500 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := free()
			env := append(os.Environ(), fakeEnv+"=listen", "FAKE_ADDR="+addr, "FAKE_SICK_MS="+tc.sick)
			s, err := StartSpec(context.Background(), Spec{Path: os.Args[0], Env: env, Addr: addr, ReadyHTTP: tc.http, ReadyWithin: tc.within})
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), "no answer to GET /health") {
					s.Kill()
					t.Fatalf("StartSpec error = %v, want a readiness timeout naming the probe", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Kill()
			if s.Addr != addr {
				t.Fatalf("Addr = %q, want %q", s.Addr, addr)
			}
		})
	}
}

// Ensure a server started in its own group takes its children with it,
// even one that ignores SIGTERM.
func TestStopGroupKillsChildren(t *testing.T) {
	t.Parallel()
	s, err := StartSpec(context.Background(), Spec{Path: os.Args[0], Env: fakeEnviron("parent"), ReadyLine: regexp.MustCompile(`^READY (\S+) child \d+$`), ReadyWithin: 10 * time.Second, Group: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	pgid, err := syscall.Getpgid(s.PID)
	if err != nil || pgid != s.PID {
		t.Fatalf("Getpgid(%d) = %d, %v, want its own group", s.PID, pgid, err)
	}
	if _, err := s.Stop(10 * time.Second); err == nil || !strings.Contains(err.Error(), "outlived") {
		t.Fatalf("Stop error = %v, want a report of the child it killed (the child ignores SIGTERM)", err)
	}
	// The child, no longer ours, is reaped by whoever inherits it: wait for that.
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(-s.PID, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still alive 10 s after Stop killed it", s.PID)
		}
	}
}

// alive reports whether pid names a process (a zombie counts as alive).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// Ensure a server that never prints READY is killed and reaped before Start
// returns: the fake's process is gone, not even a zombie of this test
// process is left.
func TestStartNeverReadyReapsChild(t *testing.T) {
	t.Parallel() // it judges only its own fake, by the PID the fake printed
	// Long enough for the fake, a test binary (under -race a slow one to
	// start), to print its first line: the error must show it.
	_, err := start(t, "silent", 3*time.Second)
	if err == nil {
		t.Fatal("Start = nil error, want a READY timeout")
	}
	if !strings.Contains(err.Error(), "no READY line") || !strings.Contains(err.Error(), "fake: starting slowly") {
		t.Fatalf("Start error = %q, want it to name the missing READY line and show the log", err)
	}
	m := regexp.MustCompile(`fake: starting slowly, pid (\d+)`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("Start error = %q: the fake's PID is not in its log", err)
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if alive(pid) { // running, or a zombie nobody reaped
		t.Fatalf("the fake, PID %d, is still a process after a failed Start", pid)
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	s, err := start(t, "deaf", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	code, err := s.Stop(200 * time.Millisecond)
	if err == nil {
		t.Fatal("Stop = nil error, want a kill report")
	}
	if code != 137 {
		t.Fatalf("Stop code = %d, want 137 (SIGKILL)", code)
	}
	if alive(s.PID) {
		t.Fatalf("pid %d still alive", s.PID)
	}
}

func TestAwaitExitSeesCrashCode(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	_, err := start(t, "fail", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited with code 2") || !strings.Contains(err.Error(), "fake: bad flag") {
		t.Fatalf("Start error = %v, want the exit code and the log", err)
	}
}

// Ensure FreePort returns a loopback port that is free again (a server
// told to listen on it can), below the kernel's ephemeral ports (where no
// listener bound to port 0 and no connection can be handed it), and not
// one it handed out a moment before.
func TestFreePort(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 300 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < minPort || port >= low {
			t.Fatalf("FreePort() = %d, want a port in %d..%d, below the ephemeral ports", port, minPort, low-1)
		}
		if seen[port] {
			t.Fatalf("FreePort() handed out %d twice in %d draws", port, len(seen)+1)
		}
		seen[port] = true
	}
	for port := range seen {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen on the free port %d: %v", port, err)
		}
		ln.Close()
		break
	}
}

// Ensure a server whose port another process took before it bound it is
// never ready on the other's answer: a TCP or HTTP probe that reaches a
// listener none of the server's processes holds is no readiness, and the
// start fails with a *PortTakenError naming who listens there, whether
// the server exits (it could not bind) or never listens. Before, the
// probe's connection made the server ready, and its calls went to
// whoever held the port (another run's effect sink, in the runner's
// tests).
func TestStartSpecPortTaken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, mode, http string }{
		{"tcp, the server exits", "listen", ""},
		{"tcp, the server never listens", "silent", ""},
		{"http, the server exits", "listen", "/health"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			taker, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taker.Close()
			go http.Serve(taker, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})) // 200 to every GET
			addr := taker.Addr().String()
			env := append(os.Environ(), fakeEnv+"="+tc.mode, "FAKE_ADDR="+addr, "FAKE_SICK_MS=0")
			s, err := StartSpec(context.Background(), Spec{Path: os.Args[0], Env: env, Addr: addr, ReadyHTTP: tc.http, ReadyWithin: 2 * time.Second, Group: true})
			if err == nil {
				s.Kill()
				t.Fatalf("StartSpec = ready on %s, whose listener is this test's, not the server's", addr)
			}
			taken, ok := errors.AsType[*PortTakenError](err)
			if !ok {
				t.Fatalf("StartSpec error = %v, want a *PortTakenError", err)
			}
			if want := fmt.Sprintf("pid %d ", os.Getpid()); !strings.HasPrefix(taken.Holder, want) || !strings.Contains(err.Error(), "not by the server") {
				t.Errorf("StartSpec error = %v, holder %q: want it to name this test binary (%s...) as the listener", err, taken.Holder, want)
			}
		})
	}
}

package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmdtest"

	"idemlab/internal/effectserver"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
	"idemlab/internal/store/volatile"
)

var update = flag.Bool("update", false, "update testdata/*.ct with the observed output")

// asServer makes the test binary run the real command (see TestMain).
const asServer = "IDEMLAB_EFFECTSERVER_MAIN"

// TestMain lets the test binary be its own subprocess: with asServer set it
// is effectserver, real os.Exit included.
func TestMain(m *testing.M) {
	if os.Getenv(asServer) == "1" {
		main()
	}
	// Up to 8 parallel tests at once unless -parallel gives another
	// number: they mostly wait on a server's timeouts and grace (about
	// 50 s of waiting, under 10 s of CPU), and the default, GOMAXPROCS, is
	// 2 on the lab's machine. At 4 the waits took two rounds (18 s).
	flag.Parse()
	if f := flag.Lookup("test.parallel"); f.Value.String() == f.DefValue {
		f.Value.Set("8")
	}
	os.Exit(pgclustertest.Main(m))
}

// Ensure the usage errors and the help text (testdata/*.ct golden files).
func TestUsage(t *testing.T) {
	ts, err := cmdtest.Read("testdata")
	if err != nil {
		t.Fatal(err)
	}
	ts.Commands["effectserver"] = cmdtest.InProcessProgram("effectserver", func() int {
		return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	})
	ts.Run(t, *update)
}

// deadline bounds every wait on a subprocess; reaching it is a failure, not a measurement.
const deadline = 20 * time.Second

// server is one effectserver subprocess.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	stdout *servertest.Buffer // everything after the READY line
	stderr *servertest.Buffer
	exited chan struct{}
	copied chan struct{}
	lines  chan string // the first stdout line
}

// startServer starts effectserver with args and, when ready is true, waits
// for its READY line. The process is killed when the test ends, whatever happens.
func startServer(t *testing.T, ready bool, args ...string) *server {
	t.Helper()
	return launch(t, exec.Command(os.Args[0], args...), ready)
}

// launch starts cmd, a command that runs this test binary as the server,
// collects its output, and when ready is true waits for its READY line.
// The process is killed when the test ends, whatever happens.
func launch(t *testing.T, cmd *exec.Cmd, ready bool) *server {
	t.Helper()
	s := &server{t: t, cmd: cmd, stdout: new(servertest.Buffer), stderr: new(servertest.Buffer), exited: make(chan struct{}), copied: make(chan struct{}), lines: make(chan string, 1)}
	// A -race child would otherwise sleep a second at exit.
	s.cmd.Env = append(os.Environ(), asServer+"=1", "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	s.cmd.Stderr = s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.copied)
		r := bufio.NewReader(out)
		line, err := r.ReadString('\n')
		s.lines <- line
		if err == nil {
			io.Copy(s.stdout, r)
		}
	}()
	go func() {
		<-s.copied // Wait closes the pipe: read it all first
		s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
			<-s.exited
		}
	})
	if ready {
		s.ready()
	}
	return s
}

// ready waits for the READY line and keeps the address it names.
func (s *server) ready() {
	t := s.t
	t.Helper()
	select {
	case line := <-s.lines:
		addr, ok := strings.CutPrefix(line, "READY ")
		if !ok || !strings.HasSuffix(addr, "\n") || !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("first stdout line = %q, want READY 127.0.0.1:PORT; stderr:\n%s", line, s.stderr)
		}
		s.addr = strings.TrimSuffix(addr, "\n")
	case <-time.After(deadline):
		t.Fatalf("no READY line within %v; stderr:\n%s", deadline, s.stderr)
	}
}

// wait returns the exit status once the process has ended.
func (s *server) wait() int {
	s.t.Helper()
	select {
	case <-s.exited:
		return s.cmd.ProcessState.ExitCode()
	case <-time.After(deadline):
		s.t.Fatalf("server still running after %v; stderr:\n%s", deadline, s.stderr)
		return -1
	}
}

// stop sends SIGTERM and returns the exit status.
func (s *server) stop() int {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	return s.wait()
}

// client never reuses a connection: Go's http.Transport would silently
// resend a keyed request after a dropped reply on a reused one.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: deadline}

// post sends POST /effect; status 0 means no reply came.
func (s *server) post(key, fault string) (status int, body, replayed string) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/effect", strings.NewReader("add-one"))
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if fault != "" {
		req.Header.Set("X-Lab-Fault", fault)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, "", ""
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return res.StatusCode, string(b), res.Header.Get("Idempotency-Replayed")
}

func readCounter(t *testing.T, dir string) int64 {
	t.Helper()
	v, err := volatile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Ensure the real binary prints READY, serves, and exits 0 on SIGTERM with nothing more on stdout.
func TestServeAndTerminate(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, true, "-state", dir)
	if status, body, replayed := s.post("k", ""); status != 200 || body != "1" || replayed != "false" {
		t.Fatalf("POST = %d %q replayed %q, want 200 1 false", status, body, replayed)
	}
	if status, body, replayed := s.post("k", ""); status != 200 || body != "1" || replayed != "true" {
		t.Fatalf("retry = %d %q replayed %q, want 200 1 true", status, body, replayed)
	}
	if got := s.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, s.stderr)
	}
	<-s.copied
	if got := s.stdout.String(); got != "" {
		t.Errorf("stdout after READY = %q, want nothing", got)
	}
	if got := strings.Count(s.stderr.String(), "msg=request "); got != 2 {
		t.Errorf("stderr has %d request lines, want 2:\n%s", got, s.stderr)
	}
	if got := readCounter(t, dir); got != 1 {
		t.Fatalf("counter = %d, want 1", got)
	}
}

// Ensure crash-after-effect really exits 23, with the effect on disk.
func TestCrashAfterEffectExits23(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, true, "-state", dir, "-faults")
	if status, _, _ := s.post("same", "crash-after-effect"); status != 0 {
		t.Fatalf("crash request got status %d, want no reply", status)
	}
	if got := s.wait(); got != 23 {
		t.Fatalf("exit status = %d, want 23; stderr:\n%s", got, s.stderr)
	}
	if got := readCounter(t, dir); got != 1 {
		t.Fatalf("counter = %d, want 1", got)
	}
	// Volatile store: the restarted server forgot the key and runs it again.
	s2 := startServer(t, true, "-state", dir, "-faults")
	if status, body, replayed := s2.post("same", ""); status != 200 || body != "2" || replayed != "false" {
		t.Fatalf("retry after restart = %d %q replayed %q, want 200 2 false", status, body, replayed)
	}
	if got := s2.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0", got)
	}
}

// Ensure drop-reply applies the effect but the client sees no reply.
func TestDropReplyNoReply(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, true, "-state", dir, "-faults")
	if status, body, _ := s.post("", "drop-reply"); status != 0 {
		t.Fatalf("drop-reply got %d %q, want no reply", status, body)
	}
	if got := s.stop(); got != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, s.stderr)
	}
	if got := readCounter(t, dir); got != 1 {
		t.Fatalf("counter = %d, want 1", got)
	}
}

// Ensure -faults off loopback is a usage error in the real process: exit 2
// (never 3: the command line is wrong, not the state) and a one-line reason.
func TestFaultsOffLoopbackExits2(t *testing.T) {
	s := startServer(t, false, "-state", t.TempDir(), "-faults", "-addr", "0.0.0.0:0")
	exitsWith(t, s, effectserver.ExitUsage, "effectserver: -faults: refused with -addr 0.0.0.0:0: not a loopback address (want 127.0.0.0/8, ::1 or localhost)")
}

// Ensure a malformed counter file stops the start with exit 3, naming the file.
// Ensure -read-state reports the effects a real server applied, each with
// its value and body digest, once the server exited.
func TestReadStateAfterServing(t *testing.T) {
	for _, store := range []string{"volatile", "durable"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			s := startServer(t, true, "-state", dir, "-store", store)
			for _, key := range []string{"a", "b", "a"} {
				if status, _, _ := s.post(key, ""); status != 200 {
					t.Fatalf("post %s = %d", key, status)
				}
			}
			if code := s.stop(); code != 0 {
				t.Fatalf("stop = %d", code)
			}
			readState := func(format string) ([]byte, error) {
				cmd := exec.Command(os.Args[0], "-read-state", format, "-store", store, "-state", dir)
				cmd.Env = append(os.Environ(), asServer+"=1")
				return cmd.Output()
			}
			out, err := readState("json")
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				Counter int64 `json:"counter"`
				Effects []struct {
					Value      int64  `json:"value"`
					BodySHA256 string `json:"body_sha256"`
				} `json:"effects"`
			}
			if err := json.Unmarshal(out, &st); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			sum := sha256.Sum256([]byte(protocol.DefaultBody))
			if st.Counter != 2 || len(st.Effects) != 2 || st.Effects[1].Value != 2 || st.Effects[0].BodySHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("-read-state json = %s, want 2 effects of the default body", out)
			}
			out, err = readState("counter")
			if err != nil || string(out) != "2\n" {
				t.Fatalf("-read-state counter = %q, %v, want 2", out, err)
			}
		})
	}
}

func TestMalformedCounterExits3(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "counter")
	if err := os.WriteFile(path, []byte("seven\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused(t, startServer(t, false, "-state", dir), path, "malformed content")
}

// Package sinktest gives tests of the sink and the fault proxy a real
// target: the test binary re-executed as a tiny HTTP service whose handler
// performs its effect through the sink, the way docs/targets.md asks a
// target to. A test binary that uses it calls Main from its TestMain.
//
// The target answers every request by POSTing the request's body to its
// EFFECT_URL (forwarding an Idempotency-Key it was sent), and answers 200
// with the sink's body; a sink reply other than 200 it answers with 502 and
// "sink STATUS: BODY". With no EFFECT_URL it answers "ok". With a MARKER
// file it writes the value it is about to answer there first, so that a
// test can tell that the reply was produced even when it never arrived.
//
// It is a package of its own so that nothing but tests links package
// testing.
package sinktest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// targetEnv, set to 1, makes the test binary run as a target.
const targetEnv = "IDEMLAB_SINKTEST_TARGET"

// Bounds of the target.
const (
	readyWithin = 30 * time.Second // from start to its READY line
	maxBody     = 8 << 20          // a request body it reads
	sinkTimeout = 3 * time.Minute  // its call to the sink, longer than any sink wait
)

// Main runs the target instead of the tests when the test binary was
// started as one; otherwise it runs the tests. Call it as
// os.Exit(sinktest.Main(m)) from TestMain.
func Main(m *testing.M) int {
	if os.Getenv(targetEnv) == "1" {
		return targetMain(os.Stdout, os.Stderr)
	}
	return m.Run()
}

// targetMain serves on a free loopback port, printing "READY PORT" once it
// listens, until it is killed.
func targetMain(stdout, stderr io.Writer) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(stderr, "target: %v\n", err)
		return 1
	}
	t := &target{effectURL: os.Getenv("EFFECT_URL"), marker: os.Getenv("MARKER"),
		client: &http.Client{Timeout: sinkTimeout}}
	fmt.Fprintf(stdout, "READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	err = http.Serve(ln, t)
	fmt.Fprintf(stderr, "target: %v\n", err)
	return 1
}

type target struct {
	effectURL string
	marker    string
	client    *http.Client
}

func (t *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	value := "ok"
	if t.effectURL != "" {
		status, got, err := t.effect(body, r.Header.Values("Idempotency-Key"))
		if err != nil {
			http.Error(w, "sink: "+err.Error(), http.StatusBadGateway)
			return
		}
		if status != http.StatusOK {
			http.Error(w, fmt.Sprintf("sink %d: %s", status, got), http.StatusBadGateway)
			return
		}
		value = got
	}
	if t.marker != "" {
		if err := os.WriteFile(t.marker, []byte(value), 0o644); err != nil {
			http.Error(w, "marker: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, value)
}

// effect POSTs body to the sink and returns its status and body.
func (t *target) effect(body []byte, key []string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, t.effectURL, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if len(key) > 0 {
		req.Header["Idempotency-Key"] = key
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(got), nil
}

// Options configure a target.
type Options struct {
	EffectURL string // where the handler performs its effect; "" for none
	Marker    string // a file the handler writes its value to before answering; "" for none
}

// A Target is a running target process.
type Target struct {
	Addr string // host:port it serves on
	PID  int

	cmd    *exec.Cmd
	exited chan struct{} // closed once the process exited and was reaped
	stderr lockedBuffer
	kill   sync.Once
}

// StartTarget starts a target and waits for it to listen. The target is
// killed when t ends; a target that does not get ready within 30 s fails t.
func StartTarget(t testing.TB, opts Options) *Target {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), targetEnv+"=1", "EFFECT_URL="+opts.EffectURL, "MARKER="+opts.Marker)
	cmd.SysProcAttr = childAttr()
	tg := &Target{cmd: cmd, exited: make(chan struct{})}
	cmd.Stderr = &tg.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("target: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("target: start: %v", err)
	}
	tg.PID = cmd.Process.Pid
	t.Cleanup(tg.Kill)

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if port, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				select {
				case ready <- port:
				default:
				}
			}
		}
		cmd.Wait() // the pipe is drained: Wait may close it
		close(tg.exited)
	}()
	select {
	case port := <-ready:
		tg.Addr = net.JoinHostPort("127.0.0.1", port)
	case <-tg.exited:
		t.Fatalf("target exited before it was ready: %v; stderr:\n%s", cmd.ProcessState, tg.stderr.String())
	case <-time.After(readyWithin):
		t.Fatalf("target not ready within %v; stderr:\n%s", readyWithin, tg.stderr.String())
	}
	return tg
}

// Kill kills the target with SIGKILL and returns once it exited. It is
// safe to call more than once, and after the target exited.
func (tg *Target) Kill() {
	tg.kill.Do(func() { tg.cmd.Process.Kill() })
	<-tg.exited
}

// Exited is closed once the target exited (and was reaped).
func (tg *Target) Exited() <-chan struct{} { return tg.exited }

// State is how the target exited; valid once Exited is closed.
func (tg *Target) State() *os.ProcessState { return tg.cmd.ProcessState }

// Stderr returns what the target wrote to its stderr so far.
func (tg *Target) Stderr() string { return tg.stderr.String() }

// lockedBuffer is a bytes.Buffer that os/exec may write while a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		return len(p), nil // bounded: later output is dropped
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Package serverproc owns one effectserver subprocess: it starts it, waits
// for its READY line, collects its log lines, stops it with SIGTERM or waits
// for it to exit on its own, and kills it on every other path so that no
// server outlives the runner.
package serverproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ReadyPrefix starts the one line a server prints on stdout once it accepts
// connections.
const ReadyPrefix = "READY "

// maxLogLines bounds the log kept per server; later lines are counted, not kept.
const maxLogLines = 2000

// Server is a running (or exited) effectserver process.
type Server struct {
	Addr    string        // host:port from the READY line
	PID     int           // process id
	ReadyIn time.Duration // from start to the READY line

	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited and been reaped
	status int           // exit code, valid after done; -1 if killed by a signal

	mu      sync.Mutex
	log     []string
	dropped int
}

// Start runs path with args and waits up to readyWithin for the READY line.
// On any failure the process is killed and reaped before Start returns.
func Start(ctx context.Context, path string, args []string, readyWithin time.Duration) (*Server, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = childAttr()
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	s := &Server{PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}

	ready := make(chan string, 1)
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() {
		defer pipes.Done()
		s.readStdout(stdout, ready)
	}()
	go func() {
		defer pipes.Done()
		s.collect(stderr)
	}()
	go func() {
		// Wait only after the pipes are drained, as os/exec requires.
		pipes.Wait()
		err := cmd.Wait()
		s.status = exitCode(cmd, err)
		close(s.done)
	}()

	timer := time.NewTimer(readyWithin)
	defer timer.Stop()
	select {
	case line := <-ready:
		s.Addr = strings.TrimPrefix(line, ReadyPrefix)
		s.ReadyIn = time.Since(began)
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("server exited with code %d before READY: %s", s.status, s.tail())
	case <-timer.C:
		s.Kill()
		return nil, fmt.Errorf("server printed no READY line within %v: %s", readyWithin, s.tail())
	case <-ctx.Done():
		s.Kill()
		return nil, fmt.Errorf("server start: %w", ctx.Err())
	}
}

// readStdout passes the READY line on and keeps anything else as log: a
// server must print nothing else there.
func (s *Server) readStdout(r io.Reader, ready chan<- string) {
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		if !sent && strings.HasPrefix(line, ReadyPrefix) {
			ready <- line
			sent = true
			continue
		}
		s.addLog("stdout: " + line)
	}
	_, _ = io.Copy(io.Discard, r) // a line too long for the scanner: keep draining
}

func (s *Server) collect(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		s.addLog(sc.Text())
	}
	_, _ = io.Copy(io.Discard, r)
}

func (s *Server) addLog(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) >= maxLogLines {
		s.dropped++
		return
	}
	s.log = append(s.log, line)
}

// Log returns the server's log lines so far (stderr, and any stray stdout).
func (s *Server) Log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]string(nil), s.log...)
	if s.dropped > 0 {
		out = append(out, fmt.Sprintf("(%d more lines not kept)", s.dropped))
	}
	return out
}

func (s *Server) tail() string {
	lines := s.Log()
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	if len(lines) == 0 {
		return "(no output)"
	}
	return strings.Join(lines, " | ")
}

// Stop sends SIGTERM and waits up to within for the exit; past that the
// process is killed and Stop reports it. It returns the exit code.
func (s *Server) Stop(within time.Duration) (int, error) {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.Kill()
		return s.status, fmt.Errorf("signal server %d: %w", s.PID, err)
	}
	return s.AwaitExit(within)
}

// AwaitExit waits up to within for the process to exit on its own (after a
// crash fault). Past that it is killed, and the code is -1 with an error.
func (s *Server) AwaitExit(within time.Duration) (int, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-s.done:
		return s.status, nil
	case <-timer.C:
		s.Kill()
		return s.status, fmt.Errorf("server %d did not exit within %v; killed", s.PID, within)
	}
}

// Exited reports whether the process has exited and been reaped.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Kill kills the process if it still runs and waits until it is reaped. It
// is safe to call on every path, any number of times.
func (s *Server) Kill() {
	if !s.Exited() {
		_ = s.cmd.Process.Kill() // an error means it is already gone
	}
	<-s.done
}

func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState != nil {
		return cmd.ProcessState.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// ProcessesMentioning lists the PIDs of live processes whose command line
// contains s (read from /proc): how tests prove that nothing the lab
// started under a folder outlived it.
func ProcessesMentioning(s string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Package serverproc owns one server subprocess, the lab's effect server or
// a target: it starts it, waits until it is ready (a line, or a connection
// to its port), collects its log, stops it or waits for it to exit, and
// kills it on every other path so that no server outlives the runner; and
// it reads the state effect servers left (ReadState).
package serverproc

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// ReadyPrefix starts the line a server prints once it accepts connections.
const ReadyPrefix = "READY "

// maxLogLines bounds the log kept per server; later lines are counted, not
// kept. MaxLineBytes bounds one line kept: a longer line is cut there and
// marked with how much was cut, and the lines after it are read on.
const (
	maxLogLines  = 2000
	MaxLineBytes = 4096
)

// Server is a running (or exited) effectserver process.
type Server struct {
	Addr    string        // host:port from the READY line
	PID     int           // process id
	ReadyIn time.Duration // from start to the READY line

	cmd    *exec.Cmd
	group  bool          // signals go to the process group
	done   chan struct{} // closed when the process has exited and been reaped
	status int           // exit code, valid after done; 128+N if killed by signal N
	// outlived: processes of its group were left when it exited (valid
	// after done); they were killed.
	outlived bool
	// escaped: a process outside its group (setsid) held its output open
	// past the drain bound, and was not waited for (valid after done).
	escaped bool
	// strayed: processes outside its group carried its mark when it
	// exited (valid after done); they were killed.
	strayed strayed
	// unmarked: a process outside its group without its mark (it cleared
	// its environment) was left in its cgroup (valid after done); the
	// cgroup's kill ended it.
	unmarked bool
	// cgLeft: its cgroup could not be removed once it was killed (a
	// process in it outlived every kill for cgroupWithin; valid after done)
	cgLeft error
	mark   string  // MarkEnv's value in its environment
	cg     *cgroup // its own, where the lab makes them (Cgroups); nil if not

	mu         sync.Mutex
	log        []string
	dropped    int
	portHolder string // another process that listened on Spec.Addr when the probe got an answer
}

// readyLine is the effect server's READY line; its group is the address.
var readyLine = regexp.MustCompile(`^` + ReadyPrefix + `(\S+)$`)

// A Spec says how to start a server and how to know it is ready.
type Spec struct {
	Path string
	Args []string
	Dir  string   // working folder; "" keeps the runner's
	Env  []string // the whole environment; nil inherits the runner's
	// ReadyLine, when set, is the stdout line that says the server accepts
	// connections; its first group, if any, is its host:port or port.
	ReadyLine *regexp.Regexp
	Addr      string // the address the server was told, if any (ReadyLine's wins)
	// ReadyHTTP, when set, is a path on Addr whose GET must answer below
	// 500; otherwise, without ReadyLine, a TCP connection to Addr is ready.
	ReadyHTTP   string
	ReadyWithin time.Duration
	Group       bool // a process group of its own, which Stop and Kill signal whole
}

// Start runs the effect server at path and waits for its READY line.
func Start(ctx context.Context, path string, args []string, readyWithin time.Duration) (*Server, error) {
	return StartSpec(ctx, Spec{Path: path, Args: args, ReadyLine: readyLine, ReadyWithin: readyWithin})
}

// StartSpec starts the server spec describes and waits until it is ready.
// On any failure the process (its group, with spec.Group) is killed and
// reaped before StartSpec returns.
func StartSpec(ctx context.Context, spec Spec) (*Server, error) {
	cmd := exec.CommandContext(ctx, spec.Path, spec.Args...)
	s := &Server{cmd: cmd, group: spec.Group, done: make(chan struct{}), mark: newMark()}
	s.cg = newCgroup(s.mark)
	cmd.Dir, cmd.Env = spec.Dir, withMark(spec.Env, s.mark)
	cmd.SysProcAttr = s.cg.attr(childAttr(spec.Group))
	cmd.Cancel = func() error { s.signal(syscall.SIGKILL); return nil }
	// The pipes are the lab's own, not os/exec's, so that Wait returns when
	// the server exits whoever else holds them (a child it left, one that
	// left its group), and the reading of its log is bounded apart.
	var stdout, stderr, outW, errW *os.File
	stdout, outW, err := os.Pipe()
	if err == nil {
		stderr, errW, err = os.Pipe()
		cmd.Stdout, cmd.Stderr = outW, errW
	}
	began := time.Now()
	if err == nil {
		err = cmd.Start()
	}
	s.cg.closeFD()
	for _, f := range []*os.File{outW, errW} {
		if f != nil {
			f.Close() // the server has its copies
		}
	}
	if err != nil {
		for _, f := range []*os.File{stdout, stderr} {
			if f != nil {
				f.Close()
			}
		}
		err = fmt.Errorf("start %s: %w", spec.Path, err)
		if left := s.cg.remove(); left != nil {
			err = errors.Join(err, left)
		}
		return nil, err
	}
	s.PID = cmd.Process.Pid

	ready := make(chan string, 1)
	var pipes sync.WaitGroup
	pipes.Go(func() { s.readLog(stdout, "stdout: ", spec.ReadyLine, ready) })
	pipes.Go(func() { s.readLog(stderr, "", nil, nil) })
	go s.reap(&pipes, stdout, stderr)

	if spec.ReadyLine == nil {
		go s.probe(spec.Addr, spec.ReadyHTTP, spec.ReadyWithin, ready)
	}
	timer := time.NewTimer(spec.ReadyWithin)
	defer timer.Stop()
	select {
	case addr := <-ready:
		s.Addr = cmp.Or(addr, spec.Addr)
		s.ReadyIn = time.Since(began)
		return s, nil
	case <-s.done:
		return nil, s.portTaken(spec, fmt.Errorf("server exited with code %d before it was ready: %s", s.status, s.tail()))
	case <-timer.C:
		s.Kill()
		return nil, s.portTaken(spec, fmt.Errorf("server was not ready within %v (%s): %s", spec.ReadyWithin, notReady(spec), s.tail()))
	case <-ctx.Done():
		s.Kill()
		return nil, fmt.Errorf("server start: %w", ctx.Err())
	}
}

// reap waits for the server's exit (the pipes are not os/exec's: Wait
// returns then) and ends its log. A process outside its group that carries
// its mark (one that left the group: setsid) is killed at once. The log
// ends when every process holding the pipes closed them: the server's
// group goes with it, normally, within DrainWithin. What of its group is
// left then is killed (sweepGroup reports it); a process that cleared its
// environment and left the group, beyond both kills, is killed with the
// server's cgroup where the lab makes them (Cgroups), and elsewhere is not
// waited for.
func (s *Server) reap(pipes *sync.WaitGroup, stdout, stderr *os.File) {
	err := s.cmd.Wait()
	s.status = exitCode(s.cmd, err)
	s.strayed = s.killStrays()
	drained := make(chan struct{})
	go func() { pipes.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(DrainWithin):
	}
	if s.group && syscall.Kill(-s.PID, 0) == nil {
		s.outlived = true
		_ = syscall.Kill(-s.PID, syscall.SIGKILL)
	}
	s.strayed = s.strayed.join(s.killStrays()) // one its group started as it went
	// What is left in its cgroup left the group and cleared its
	// environment: only the cgroup's kill reaches it.
	pgid := 0
	if s.group {
		pgid = s.PID
	}
	s.unmarked = s.cg.kill(s.mark, pgid) > 0
	// Killed, the group's members close the pipes at once; what still
	// holds them is beyond every kill (no cgroup of its own here).
	deadline := time.Now().Add(DrainWithin / 4)
	stdout.SetReadDeadline(deadline)
	stderr.SetReadDeadline(deadline)
	<-drained
	s.escaped = !time.Now().Before(deadline)
	stdout.Close()
	stderr.Close()
	s.cgLeft = s.cg.remove()
	close(s.done)
}

// notReady says what a server that never got ready did not do.
func notReady(spec Spec) string {
	switch {
	case spec.ReadyLine != nil && spec.ReadyLine != readyLine:
		return fmt.Sprintf("no line matching %q", spec.ReadyLine)
	case spec.ReadyLine == nil && spec.ReadyHTTP != "":
		return fmt.Sprintf("no answer to GET %s on %s", spec.ReadyHTTP, spec.Addr)
	case spec.ReadyLine == nil:
		return "no connection accepted on " + spec.Addr
	}
	return "no READY line"
}

// probe sends addr on ready once a TCP connection to it succeeds, or GET
// path answers below 500; it gives up with the process or after within.
func (s *Server) probe(addr, path string, within time.Duration, ready chan<- string) {
	deadline := time.Now().Add(within)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	for time.Now().Before(deadline) && !s.Exited() {
		answered := false
		if path == "" {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				answered = true
			}
		} else if resp, err := hc.Get("http://" + addr + path); err == nil {
			resp.Body.Close()
			answered = resp.StatusCode < 500
		}
		if answered {
			// Whoever answered must be the server: a port drawn for it can
			// be taken before it binds (FreePort). One that answered and
			// is gone already was not the server either.
			l := s.listenerOf(addr)
			if l.ours || !l.known {
				ready <- addr
				return
			}
			if l.holder != "" {
				s.mu.Lock()
				s.portHolder = l.holder
				s.mu.Unlock()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// portTaken wraps err, a start that failed, as a *PortTakenError when
// another process listens on the address spec told the server.
func (s *Server) portTaken(spec Spec, err error) error {
	if spec.ReadyLine != nil || spec.Addr == "" {
		return err
	}
	s.mu.Lock()
	holder := s.portHolder
	s.mu.Unlock()
	if holder == "" {
		holder = s.listenerOf(spec.Addr).holder // the server may have exited before the probe looked
	}
	if holder == "" {
		return err
	}
	return &PortTakenError{Addr: spec.Addr, Holder: holder, Err: err}
}

// readLog keeps every line of r as log, after prefix, except the first
// one matching ready (if set), whose address it passes on found ("" when
// the line names none).
func (s *Server) readLog(r io.Reader, prefix string, ready *regexp.Regexp, found chan<- string) {
	eachLine(r, MaxLineBytes, func(line string) {
		if ready != nil && ready.MatchString(line) {
			found <- readyAddr(ready.FindStringSubmatch(line))
			ready = nil
			return
		}
		s.addLog(prefix + line)
	})
}

// eachLine calls f with each line of r until r ends, without its "\n" (or
// "\r\n"), the last one even without a newline: a line longer than max
// bytes is cut there and marked with how many bytes were cut, and the
// lines after it follow (a target's one 2 MB line must not end its log,
// nor cost more than max).
func eachLine(r io.Reader, max int, f func(string)) {
	br := bufio.NewReaderSize(r, max)
	line := make([]byte, 0, max)
	cut := int64(0)
	for {
		chunk, err := br.ReadSlice('\n')
		end := err == nil // chunk ends the line
		if end {
			chunk = chunk[:len(chunk)-1]
		}
		take := min(len(chunk), max-len(line))
		line = append(line, chunk[:take]...)
		cut += int64(len(chunk) - take)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if end || len(line) > 0 || cut > 0 {
			text := strings.TrimSuffix(string(line), "\r")
			if cut > 0 {
				text += fmt.Sprintf(" [line cut at %d bytes: %d more not kept]", max, cut)
			}
			f(text)
		}
		if !end {
			return
		}
		line, cut = line[:0], 0
	}
}

// readyAddr is the address a ready line's match names: its first group,
// host:port or a bare port on 127.0.0.1; "" when it has none.
func readyAddr(m []string) string {
	if len(m) < 2 {
		return ""
	}
	if _, err := strconv.Atoi(m[1]); err == nil {
		return net.JoinHostPort("127.0.0.1", m[1])
	}
	return m[1]
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

// Stop sends SIGTERM and returns the exit code; past within the process is
// killed and Stop says so.
func (s *Server) Stop(within time.Duration) (int, error) {
	if err := s.signal(syscall.SIGTERM); err != nil {
		s.Kill()
		return s.status, fmt.Errorf("signal server %d: %w", s.PID, err)
	}
	return s.AwaitExit(within)
}

// signal sends sig to the process, or its group; one already gone is fine.
func (s *Server) signal(sig syscall.Signal) error {
	var err error
	if s.group {
		err = syscall.Kill(-s.PID, sig)
		if errors.Is(err, syscall.ESRCH) {
			err = nil
		}
	} else if err = s.cmd.Process.Signal(sig); errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// AwaitExit waits up to within for the process to exit on its own (after a
// crash fault). Past that it is killed, and the code is -1 with an error.
func (s *Server) AwaitExit(within time.Duration) (int, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-s.done:
		return s.status, s.sweepGroup()
	case <-timer.C:
		s.Kill()
		return s.status, fmt.Errorf("server %d did not exit within %v; killed", s.PID, within)
	}
}

// sweepGroup kills what is left of a server's process group once the
// server itself exited (a child it did not take with it), and says so; and
// says so of a process that left the group (setsid) carrying its mark,
// which reap killed. One that also cleared its environment is beyond both
// kills; where it held the server's output open, the error says so.
func (s *Server) sweepGroup() error {
	if s.group && (s.outlived || syscall.Kill(-s.PID, 0) == nil) {
		_ = syscall.Kill(-s.PID, syscall.SIGKILL)
		return fmt.Errorf("server %d exited, but processes of its group outlived it; killed", s.PID)
	}
	if s.strayed.any() {
		return fmt.Errorf("server %d exited, but a process it started outside its process group (setsid) outlived it: %v; killed by the server's mark (%s)", s.PID, s.strayed, MarkEnv)
	}
	if s.unmarked {
		return fmt.Errorf("server %d exited, but a process it started outside its process group (setsid) that cleared its environment outlived it; killed by its cgroup", s.PID)
	}
	if s.escaped {
		return fmt.Errorf("server %d exited, but a process it started outside its process group (setsid) held its output open; not waited for past %v", s.PID, DrainWithin)
	}
	if s.cgLeft != nil {
		return fmt.Errorf("server %d exited, but its cgroup was left: %w", s.PID, s.cgLeft)
	}
	return nil
}

// killStrays kills the processes outside the server's group that carry
// its mark (with no group of its own, every one), and returns them.
func (s *Server) killStrays() strayed {
	skip := 0
	if s.group {
		skip = s.PID
	}
	return killMarked(s.mark, skip)
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

// Kill kills the process if it still runs and waits until it is reaped,
// safely on every path, any number of times.
func (s *Server) Kill() {
	if !s.Exited() {
		_ = s.signal(syscall.SIGKILL) // an error means it is already gone
	}
	<-s.done
	_ = s.sweepGroup()
}

// exitCode is the process's exit status, or 128+N for a process that
// signal N ended (as a shell reports it: 137 for SIGKILL, 143 for SIGTERM).
func exitCode(cmd *exec.Cmd, err error) int {
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ps.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// readStateWithin bounds one read of a store's state.
const readStateWithin = 30 * time.Second

// ReadState reads what the servers of store kind left at p, once every one
// exited, with the effect server's -read-state mode: the runner links no
// store engine, and the server refuses bad state as it does at start.
func ReadState(ctx context.Context, path string, kind protocol.Store, p store.Place) (store.State, error) {
	args := []string{"-read-state", "json", "-store", string(kind)}
	if p.DSN != "" {
		args = append(args, "-dsn", p.DSN)
	} else {
		args = append(args, "-state", p.Dir)
	}
	ctx, cancel := context.WithTimeout(ctx, readStateWithin)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = withMark(nil, newMark())
	cmd.SysProcAttr = childAttr(false)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return store.State{}, fmt.Errorf("read %s state: %w: %s", kind, err, strings.TrimSpace(stderr.String()))
	}
	var st store.State
	d := json.NewDecoder(bytes.NewReader(out))
	d.DisallowUnknownFields()
	if err := d.Decode(&st); err != nil {
		return store.State{}, fmt.Errorf("read %s state: %w", kind, err)
	}
	if int64(len(st.Effects)) != st.Counter {
		return store.State{}, fmt.Errorf("read %s state: counter %d, but %d effects journaled", kind, st.Counter, len(st.Effects))
	}
	return st, nil
}

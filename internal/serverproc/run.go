package serverproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// DrainWithin bounds how long the lab reads a process's output once the
// process itself exited and what was left of its process group was killed:
// only a process that left the group (setsid, a daemon) can still hold the
// pipes then, and it is not waited for.
const DrainWithin = 2 * time.Second

// A Command is a short command the lab runs for a target and waits for: its
// setup, its runtime's version, its count or journal command.
type Command struct {
	Argv   []string
	Dir    string        // working folder
	Env    []string      // the whole environment: nothing of the runner's is inherited
	Within time.Duration // the time limit; past it the process group is killed
	// Stdout and Stderr receive what the command prints, as it is read
	// (nil discards it; the same writer for both is one pipe, in order).
	// A write error (Head's past its bound) kills the process group at
	// once, and Run returns it.
	Stdout, Stderr io.Writer
}

// Run runs c in a process group of its own, with the parent-death signal
// (Linux), and kills the whole group on every way out: when the command
// exits (what its children left behind), past c.Within, when ctx ends, or
// when a writer refuses more output; a process that left the group
// (setsid) carrying the command's mark (MarkEnv) is killed with it, and,
// where the command otherwise succeeded, Run says so. A process that left
// the group and cleared its environment, beyond both kills, is killed with
// the command's cgroup where the lab makes them (Cgroups), and Run says
// so; elsewhere Run returns at most DrainWithin after the kills, not
// waiting for such a process if it still holds the output, and says that
// (docs/bounds.md).
//
// The error is the command's exit (an *exec.ExitError) or why it was
// stopped: ctx's error (an interrupted run), the time limit, or the
// output's bound (an *OverError).
func Run(ctx context.Context, c Command) (err error) {
	if len(c.Argv) == 0 {
		return errors.New("no command")
	}
	limited, cancel := context.WithTimeout(ctx, c.Within)
	defer cancel()
	r := &bounded{cmd: exec.Command(c.Argv[0], c.Argv[1:]...)}
	r.cmd.Dir = c.Dir
	r.mark = newMark()
	r.cmd.Env = withMark(append([]string{}, c.Env...), r.mark) // never nil: nil would inherit the runner's
	r.cg = newCgroup(r.mark)
	r.cmd.SysProcAttr = r.cg.attr(childAttr(true))
	defer func() {
		if left := r.cg.remove(); left != nil { // said beside whatever else
			err = errors.Join(err, left)
		}
	}()
	if err := r.start(c); err != nil {
		return err
	}
	r.pumpAll()
	waitErr := r.wait(limited)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case r.over != nil:
		return r.over
	case limited.Err() != nil:
		return fmt.Errorf("did not finish within %v; its process group was killed", c.Within)
	case waitErr != nil:
		return waitErr
	case r.strayed.any():
		return fmt.Errorf("exited, but a process it started outside its process group (setsid) outlived it: %v; killed by the command's mark (%s)", r.strayed, MarkEnv)
	case r.unmarked:
		return errors.New("exited, but a process it started outside its process group (setsid) that cleared its environment outlived it; killed by its cgroup")
	case r.held:
		return fmt.Errorf("exited, but a process it started outside its process group (setsid) held its output open; not waited for past %v", DrainWithin)
	}
	return nil
}

// bounded is one Run: its command and the lab's own pipes to it. The pipes
// are the lab's, not os/exec's: Wait returns when the command exits,
// whoever else holds them, and the readers are bounded apart from it.
type bounded struct {
	cmd     *exec.Cmd
	streams []stream
	pumps   sync.WaitGroup
	mu      sync.Mutex
	over    error   // the first write error
	held    bool    // a reader stopped at the drain deadline
	strayed strayed // processes outside the group carried its mark; killed
	// unmarked: a process outside the group without the mark (it cleared
	// its environment) was left in its cgroup; killed
	unmarked bool
	mark     string
	cg       *cgroup // nil where the lab makes none (Cgroups)
}

// stream is one pipe from the command to a writer of the caller's.
type stream struct {
	name string
	w    io.Writer
	r    *os.File
}

// open makes the pipe of a stream; nil w: none (os/exec opens /dev/null).
func (b *bounded) open(name string, w io.Writer) (io.Writer, error) {
	if w == nil {
		return nil, nil
	}
	r, wf, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	b.streams = append(b.streams, stream{name, w, r})
	return wf, nil
}

// start opens the pipes and starts the command; the child keeps the
// pipes' write ends, so a read sees EOF once every holder closed theirs.
func (b *bounded) start(c Command) error {
	cmd := b.cmd
	var err error
	if c.Stdout != nil && c.Stdout == c.Stderr {
		cmd.Stdout, err = b.open("stdout and stderr", c.Stdout)
		cmd.Stderr = cmd.Stdout
	} else if cmd.Stdout, err = b.open("stdout", c.Stdout); err == nil {
		cmd.Stderr, err = b.open("stderr", c.Stderr)
	}
	if err == nil {
		err = cmd.Start()
	}
	b.cg.closeFD()
	for _, w := range []io.Writer{cmd.Stdout, cmd.Stderr} {
		if f, ok := w.(*os.File); ok {
			f.Close()
		}
	}
	if err != nil {
		for _, s := range b.streams {
			s.r.Close()
		}
	}
	return err
}

// group kills the command's process group.
func (b *bounded) group() { _ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) }

// pumpAll copies every stream to its writer; a writer refusing more (its
// bound) kills the group.
func (b *bounded) pumpAll() {
	for _, s := range b.streams {
		b.pumps.Go(func() {
			stuck, err := pump(s.r, s.w)
			b.mu.Lock()
			defer b.mu.Unlock()
			b.held = b.held || stuck
			if err == nil {
				return
			}
			if oe, ok := err.(*OverError); ok {
				oe.Stream = s.name
			}
			if b.over == nil {
				b.over = err
			}
			b.group()
		})
	}
}

// wait waits for the command (killing its group when limited ends), kills
// what it left in its group, and drains the pipes until DrainWithin.
func (b *bounded) wait(limited context.Context) error {
	exited := make(chan struct{})
	go func() {
		select {
		case <-limited.Done():
			b.group()
		case <-exited:
		}
	}()
	waitErr := b.cmd.Wait()
	close(exited)
	pgid := b.cmd.Process.Pid
	b.strayed = killMarked(b.mark, pgid) // what left the group (setsid)
	b.group()                            // what the command left running in its group
	b.strayed = b.strayed.join(killMarked(b.mark, pgid))
	b.unmarked = b.cg.kill(b.mark, pgid) > 0 // what also cleared its environment
	deadline := time.Now().Add(DrainWithin)
	for _, s := range b.streams {
		_ = s.r.SetReadDeadline(deadline)
	}
	b.pumps.Wait()
	for _, s := range b.streams {
		s.r.Close()
	}
	return waitErr
}

// pump copies r to w until EOF, a read error, or w refuses more (its
// error); stuck says reading ended at the drain deadline, r still open.
func pump(r *os.File, w io.Writer) (stuck bool, err error) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false, werr
			}
		}
		if err != nil {
			return errors.Is(err, os.ErrDeadlineExceeded), nil
		}
	}
}

// An OverError is a write past a Head's bound; Run names the stream.
type OverError struct {
	Max    int
	Stream string
}

func (e *OverError) Error() string {
	return fmt.Sprintf("printed more than %d bytes on %s (its bound, docs/bounds.md); killed", e.Max, cmp.Or(e.Stream, "its output"))
}

// Head keeps the first Max bytes written to it; a write past them keeps
// what fits and fails with an *OverError, unless Quiet, when the rest is
// only counted (Dropped).
type Head struct {
	Max     int
	Quiet   bool
	Dropped int64
	buf     []byte
}

func (h *Head) Write(p []byte) (int, error) {
	room := h.Max - len(h.buf)
	if len(p) <= room {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	h.buf = append(h.buf, p[:max(room, 0)]...)
	h.Dropped += int64(len(p) - max(room, 0))
	if h.Quiet {
		return len(p), nil
	}
	return max(room, 0), &OverError{Max: h.Max}
}

// Bytes is what was kept.
func (h *Head) Bytes() []byte { return h.buf }

// Tail keeps the last Max bytes written to it and counts the ones before
// them (Cut); it holds at most 2 × Max bytes at any time.
type Tail struct {
	Max     int
	dropped int64
	buf     []byte
}

func (t *Tail) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > t.Max {
		t.dropped += int64(len(t.buf) + len(p) - t.Max)
		t.buf = append(t.buf[:0], p[len(p)-t.Max:]...)
		return n, nil
	}
	if len(t.buf)+len(p) > 2*t.Max {
		cut := len(t.buf) + len(p) - t.Max
		t.dropped += int64(cut)
		t.buf = append(t.buf[:copy(t.buf, t.buf[cut:])], p...)
		return n, nil
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Bytes is the tail kept: at most Max bytes, the last written.
func (t *Tail) Bytes() []byte {
	if len(t.buf) > t.Max {
		return t.buf[len(t.buf)-t.Max:]
	}
	return t.buf
}

// Cut is how many bytes were written before those Bytes returns.
func (t *Tail) Cut() int64 { return t.dropped + int64(len(t.buf)-len(t.Bytes())) }

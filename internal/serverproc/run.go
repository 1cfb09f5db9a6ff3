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
// when a writer refuses more output. Run returns at most DrainWithin after
// that: a process that left the group (setsid) and still holds the output
// is not waited for, and, where the command otherwise succeeded, Run says
// so. Such a process is beyond the group's kill; only a cgroup would reach
// it (docs/bounds.md).
//
// The error is the command's exit (an *exec.ExitError) or why it was
// stopped: ctx's error (an interrupted run), the time limit, or the
// output's bound (an *OverError).
func Run(ctx context.Context, c Command) error {
	if len(c.Argv) == 0 {
		return errors.New("no command")
	}
	limited, cancel := context.WithTimeout(ctx, c.Within)
	defer cancel()
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = append([]string{}, c.Env...) // never nil: nil would inherit the runner's
	cmd.SysProcAttr = childAttr(true)

	// The pipes are the lab's own, not os/exec's: Wait returns when the
	// command exits, whoever else holds them, and the readers are bounded
	// apart from it.
	type stream struct {
		name string
		w    io.Writer
		r    *os.File
	}
	var (
		streams []stream
		mu      sync.Mutex
		over    error // the first write error
		held    bool  // a reader stopped at the drain deadline
	)
	open := func(name string, w io.Writer) (io.Writer, error) {
		if w == nil {
			return nil, nil // os/exec opens /dev/null
		}
		r, wf, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		streams = append(streams, stream{name, w, r})
		return wf, nil
	}
	var err error
	if c.Stdout != nil && c.Stdout == c.Stderr {
		cmd.Stdout, err = open("stdout and stderr", c.Stdout)
		cmd.Stderr = cmd.Stdout
	} else if cmd.Stdout, err = open("stdout", c.Stdout); err == nil {
		cmd.Stderr, err = open("stderr", c.Stderr)
	}
	if err == nil {
		err = cmd.Start()
	}
	for _, w := range []io.Writer{cmd.Stdout, cmd.Stderr} {
		if f, ok := w.(*os.File); ok {
			f.Close() // the child has its copy: EOF once every holder closed theirs
		}
	}
	if err != nil {
		for _, s := range streams {
			s.r.Close()
		}
		return err
	}
	group := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var pumps sync.WaitGroup
	for _, s := range streams {
		pumps.Go(func() {
			stuck, err := pump(s.r, s.w)
			mu.Lock()
			defer mu.Unlock()
			held = held || stuck
			if err == nil {
				return
			}
			if oe, ok := err.(*OverError); ok {
				oe.Stream = s.name
			}
			if over == nil {
				over = err
			}
			group()
		})
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-limited.Done():
			group()
		case <-exited:
		}
	}()
	waitErr := cmd.Wait()
	close(exited)
	group() // what the command left running in its group
	deadline := time.Now().Add(DrainWithin)
	for _, s := range streams {
		_ = s.r.SetReadDeadline(deadline)
	}
	pumps.Wait()
	for _, s := range streams {
		s.r.Close()
	}

	mu.Lock()
	defer mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case over != nil:
		return over
	case limited.Err() != nil:
		return fmt.Errorf("did not finish within %v; its process group was killed", c.Within)
	case waitErr != nil:
		return waitErr
	case held:
		return fmt.Errorf("exited, but a process it started outside its process group (setsid) held its output open; not waited for past %v", DrainWithin)
	}
	return nil
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

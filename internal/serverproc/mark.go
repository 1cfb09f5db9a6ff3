package serverproc

import (
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
)

// MarkEnv names the variable the lab adds to the environment of every
// process it starts (a server, a target, a command of a target's): a mark
// of the runner's, then one of the process's own, "RUN.N". A child
// inherits it, and so does one that left the process group (setsid, a
// daemon), which no kill of the group reaches: once a process the lab
// started is gone, whatever still carries its mark is killed too, and the
// watchdog kills whatever carries the runner's if the runner dies first
// (docs/bounds.md). Only a process that clears its environment escapes.
const MarkEnv = "IDEMLAB_MARK"

// runMark is this runner's own mark, unique to the process.
var runMark = strings.ToLower(rand.Text()[:16])

var marks atomic.Int64

// newMark is a mark for the next process the lab starts.
func newMark() string { return fmt.Sprintf("%s.%d", runMark, marks.Add(1)) }

// withMark is env, or the runner's own environment where env is nil, with
// mark as MarkEnv (one the runner itself carries replaced: a runner that
// another runner started marks its processes as its own).
func withMark(env []string, mark string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, MarkEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, MarkEnv+"="+mark)
}

// Marked is env (nil: the runner's own) marked for a process the lab
// starts outside this package (the audit program), so that the watchdog
// ends it and what it started with a runner that died.
func Marked(env []string) []string { return withMark(env, newMark()) }

// strayed is what killMarked killed: the processes' pids, and the first
// few of them with their command lines, for the error that says so.
type strayed struct {
	pids  []int
	named []string
}

// strayNamed and strayLine bound what an error names of strayed processes.
const (
	strayNamed = 3
	strayLine  = 120
)

// any reports whether a process was killed.
func (s strayed) any() bool { return len(s.pids) > 0 }

// add records one killed process; cmdline is /proc's, NUL-separated. A
// pid already recorded (a kill's second sweep can find it not yet dead)
// is not counted twice.
func (s *strayed) add(pid int, cmdline []byte) {
	if slices.Contains(s.pids, pid) {
		return
	}
	s.pids = append(s.pids, pid)
	if len(s.named) == strayNamed {
		return
	}
	s.named = append(s.named, processName(pid, cmdline))
}

// processName names a process by pid and command line (/proc's,
// NUL-separated), the line cut at strayLine bytes: pid 12 "go telemetry".
func processName(pid int, cmdline []byte) string {
	line := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
	if len(line) > strayLine {
		line = line[:strayLine] + "..."
	}
	return fmt.Sprintf("pid %d %q", pid, line)
}

// join is s with what a later sweep killed.
func (s strayed) join(later strayed) strayed {
	for i, pid := range later.pids {
		if slices.Contains(s.pids, pid) {
			continue
		}
		s.pids = append(s.pids, pid)
		if i < len(later.named) && len(s.named) < strayNamed {
			s.named = append(s.named, later.named[i])
		}
	}
	return s
}

// String names the killed processes (pid 12 "go ** telemetry **") and
// says how many more there were.
func (s strayed) String() string {
	out := strings.Join(s.named, ", ")
	if more := len(s.pids) - len(s.named); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

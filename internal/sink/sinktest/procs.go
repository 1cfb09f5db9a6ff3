package sinktest

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// markPrefix starts the one argument of a target process: this test
// binary's mark.
const markPrefix = "idemlab-sinktest-target-of-"

// mark is this test binary's mark, the same for every target it starts
// and no other binary's: its PID and a random word (a PID alone may be
// reused).
var mark = sync.OnceValue(func() string {
	return fmt.Sprintf("%s%d-%s", markPrefix, os.Getpid(), rand.Text()[:8])
})

// Leftovers lists the processes this test binary started and did not end,
// each as "PID (NAME) STATE": every live target of the helper (its command
// line carries this binary's mark, wherever it was re-parented), and every
// child of this binary that exited and was never reaped (state Z), or
// whose command name is one of names (say "effectserver"). It reads /proc,
// and finds nothing where there is none.
func Leftovers(names ...string) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := strconv.Itoa(os.Getpid())
	var left []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // it exited since the glob
		}
		// "pid (comm) state ppid ...": comm may hold spaces and ')'.
		s := strings.TrimSpace(string(b))
		open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[shut+1:])
		if open < 0 || shut < open || len(fields) < 2 {
			continue
		}
		comm, state, ppid := s[open+1:shut], fields[0], fields[1]
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		if strings.Contains(string(cmdline), mark()) ||
			ppid == me && (state == "Z" || slices.Contains(names, comm)) {
			left = append(left, fmt.Sprintf("%s (%s) %s", strings.TrimSpace(s[:open]), comm, state))
		}
	}
	return left
}

// CheckNoneLeft fails t for each process Leftovers(names...) lists.
func CheckNoneLeft(t testing.TB, names ...string) {
	t.Helper()
	for _, p := range Leftovers(names...) {
		t.Errorf("a process this test binary started is still there: %s", p)
	}
}

package durable

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"

	"idemlab/internal/store"
)

var openRounds = flag.Int("open-rounds", 100, "rounds of TestConcurrentOpenNewFolder (two processes each)")

// openChild is the child point (see child) that waits for its standard
// input to close, then opens the store in its folder, applies one unkeyed
// intent, closes the store and exits 0; any error is printed and exits 1.
const openChild = "open"

// openAndApply is what an openChild does once released.
func openAndApply(dir string) int {
	io.Copy(io.Discard, os.Stdin) // released when the parent closes it
	s, err := Open(dir, 8)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := s.Apply(store.Intent{Fingerprint: fp("add-one")}, noHook); err != nil {
		fmt.Fprintln(os.Stderr, err)
		s.Close()
		return 1
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Ensure that processes opening the store at once on a new state folder
// all succeed: creating the database, switching it to WAL and creating the
// tables race between processes, and SQLite answers some of those races
// with SQLITE_BUSY at once, without waiting out the busy timeout. Real
// processes, because SQLite's locks within one process behave differently.
// Rounds run openAtOnce at a time, each on a folder of its own: a round
// mostly waits on its processes' starts and fsyncs (one at a time, the
// 100 rounds took 15 s in the whole suite).
func TestConcurrentOpenNewFolder(t *testing.T) {
	t.Parallel()
	rounds, procs := *openRounds, 2 // two at a time races most often
	if testing.Short() {
		rounds = min(rounds, 20)
	}
	var failed atomic.Int32
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(openAtOnce, rounds) {
		wg.Go(func() {
			for round := range next {
				failed.Add(int32(openRound(t, round, procs)))
			}
		})
	}
	for round := range rounds {
		next <- round
	}
	close(next)
	wg.Wait()
	t.Logf("%d of %d starts failed", failed.Load(), rounds*procs)
}

// openAtOnce bounds the rounds of TestConcurrentOpenNewFolder run at once.
const openAtOnce = 4

// openRound releases procs processes at once on a new folder, each to
// open the store and apply one intent, and reports how many failed; then
// the folder must hold all their effects.
func openRound(t *testing.T, round, procs int) (failed int) {
	dir := t.TempDir()
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*bytes.Buffer, procs)
	releases := make([]io.WriteCloser, procs)
	defer func() {
		for i, cmd := range cmds { // on every path: no child outlives its round
			if cmd != nil && cmd.ProcessState == nil {
				releases[i].Close()
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
	}()
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+openChild, childEnv+"_DIR="+dir, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
		outs[i] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		w, err := cmd.StdinPipe()
		if err != nil {
			t.Errorf("round %d: %v", round, err)
			return procs
		}
		if err := cmd.Start(); err != nil {
			t.Errorf("round %d: %v", round, err)
			return procs
		}
		cmds[i], releases[i] = cmd, w
	}
	for _, w := range releases {
		w.Close()
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			failed++
			t.Errorf("round %d, process %d: %v: %s", round, i, err, bytes.TrimSpace(outs[i].Bytes()))
		}
	}
	if failed > 0 {
		return failed
	}
	st, err := ReadState(dir)
	if err != nil || st.Counter != int64(procs) {
		t.Errorf("round %d: ReadState = counter %d, %v; want %d", round, st.Counter, err, procs)
	}
	return 0
}

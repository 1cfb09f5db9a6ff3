package durable

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
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
func TestConcurrentOpenNewFolder(t *testing.T) {
	rounds, procs := *openRounds, 2 // two at a time races most often
	if testing.Short() {
		rounds = min(rounds, 20)
	}
	failed := 0
	for round := range rounds {
		dir := t.TempDir()
		cmds := make([]*exec.Cmd, procs)
		outs := make([]*bytes.Buffer, procs)
		releases := make([]io.WriteCloser, procs)
		for i := range cmds {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+openChild, childEnv+"_DIR="+dir, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
			outs[i] = new(bytes.Buffer)
			cmd.Stdout, cmd.Stderr = outs[i], outs[i]
			w, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
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
		if t.Failed() {
			continue
		}
		st, err := ReadState(dir)
		if err != nil || st.Counter != int64(procs) {
			t.Errorf("round %d: ReadState = counter %d, %v; want %d", round, st.Counter, err, procs)
		}
	}
	t.Logf("%d of %d starts failed", failed, rounds*procs)
}

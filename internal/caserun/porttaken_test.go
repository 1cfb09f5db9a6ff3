package caserun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"idemlab/internal/serverproc"
	"idemlab/internal/target"
)

// Ensure a target whose {port} another process holds is the lab's
// failure, tried again on another port, and never the target's. The start
// below writes its {port} to a file and exits once something answers
// there; this test listens on each port it writes, as another process
// that took it would. Each of the 3 starts fails with a
// *serverproc.PortTakenError naming this test binary, and the error is no
// *TargetFault. Before, the readiness probe took the other listener's
// answer for the target's, and the run's calls went to whoever held the
// port.
func TestStartPortTakenIsTheLabs(t *testing.T) {
	t.Parallel()
	told := filepath.Join(t.TempDir(), "port")
	script := `echo "$1" > "$0.new" && mv "$0.new" "$0"
until (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; do sleep 0.05; done
exit 1`
	tg := &target.Target{Name: "taken", Dir: t.TempDir(), Start: target.Start{
		Argv: []string{"bash", "-c", script, told, "{port}"}, ReadyWithin: 20 * time.Second, StopGrace: time.Second}}
	var taken atomic.Int32
	done := make(chan struct{})
	defer close(done)
	go takePorts(told, &taken, done)

	s, err := startProcess(context.Background(), tg, target.Vars{})
	if err == nil {
		s.Kill()
		t.Fatal("startProcess = ready, on a port another process held")
	}
	if _, fault := errors.AsType[*TargetFault](err); fault {
		t.Errorf("startProcess error is a *TargetFault, the target's: %v", err)
	}
	pt, ok := errors.AsType[*serverproc.PortTakenError](err)
	if want := fmt.Sprintf("pid %d ", os.Getpid()); !ok || !strings.Contains(err.Error(), "(3 tries, each on another port)") || !strings.HasPrefix(pt.Holder, want) {
		t.Errorf("startProcess error = %v, want a PortTakenError after 3 tries naming this test binary (%s...)", err, want)
	}
	if n := taken.Load(); n != 3 { // each start waited for its port to answer
		t.Errorf("took %d ports, want each start's, 3", n)
	}
}

// takePorts listens on every port a start writes to file, until done,
// counting them in taken.
func takePorts(file string, taken *atomic.Int32, done <-chan struct{}) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	last := ""
	for {
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
		b, err := os.ReadFile(file)
		p := strings.TrimSpace(string(b))
		if err != nil || p == last {
			continue
		}
		last = p
		if _, err := strconv.Atoi(p); err != nil {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			continue
		}
		lns = append(lns, ln)
		taken.Add(1)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
}

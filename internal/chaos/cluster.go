package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"idemlab/internal/audit/chaosplan"
)

// A cluster owns the replicas' processes through a backend (the lab's own
// servers on a store, or a target's processes between the fault proxy and
// the sink): it starts them, kills them for the nemesis, notices when one
// exits on its own (a crash fault) or a fault killed it, restarts them on
// the same state, and records each of these as a ServerEvent. Only the
// supervisor goroutine (and Run, before and after it) starts or stops
// replicas; clients only read URLs.
//
// A replica keeps its URL for the whole run: on a store a restart asks for
// the port it had, so a client holding the URL reaches that replica or
// nothing (refused), never another replica that happened to get the port
// (if the port was taken meanwhile, the replica gets a new one; the event
// says so); on a target the URL is its proxy's, which lives for the run.
type cluster struct {
	be    backend
	began time.Time

	mu     sync.Mutex
	up     []bool   // per replica: started, its exit not yet collected
	urls   []string // per replica, what clients call
	pids   []int    // per replica, its last process
	addrs  []string // per replica, its last process's address
	cause  []string // per replica: who killed the running process ("" none yet, causeNemesis, causeFault)
	events []ServerEvent
}

// What killed a replica's process.
const (
	causeNemesis = "nemesis"
	causeFault   = "fault"
)

func newCluster(be backend, began time.Time, replicas int) *cluster {
	return &cluster{be: be, began: began, up: make([]bool, replicas), urls: make([]string, replicas), cause: make([]string, replicas),
		pids: make([]int, replicas), addrs: make([]string, replicas)}
}

func (c *cluster) since() int64 { return time.Since(c.began).Microseconds() }

func (c *cluster) record(e ServerEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

// url returns the URL of replica r ("" before its first start).
func (c *cluster) url(r int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.urls[r]
}

// running reports which replicas are running.
func (c *cluster) running() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]bool(nil), c.up...)
}

// start starts replica r, which must be down: where it was if it had a
// place, else (or if that is taken) anywhere. It tries a few times; each
// failure is recorded. The error is the last failure.
func (c *cluster) start(ctx context.Context, r int) error {
	var last error
	for try := 0; try < startTries; try++ {
		if try > 0 {
			t := time.NewTimer(time.Duration(try) * 50 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		old := c.url(r)
		pid, addr, url, err := c.be.start(ctx, r, old, old == "" || try == startTries-1)
		if err != nil {
			last = fmt.Errorf("start replica %d: %w", r, err)
			c.record(ServerEvent{Kind: EventStartFailed, Replica: r, AtUS: c.since(), Addr: addr, Planned: -1, Error: short(err.Error())})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		c.mu.Lock()
		c.up[r], c.urls[r], c.cause[r], c.pids[r], c.addrs[r] = true, url, "", pid, addr
		c.events = append(c.events, ServerEvent{Kind: EventStart, Replica: r, AtUS: c.since(), PID: pid, Addr: addr, Planned: -1})
		c.mu.Unlock()
		return nil
	}
	return last
}

// lastFailure is the error of the last start that failed, or "none".
func (c *cluster) lastFailure() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.events) - 1; i >= 0; i-- {
		if e := c.events[i]; e.Kind == EventStartFailed {
			return fmt.Sprintf("replica %d on %s: %s", e.Replica, e.Addr, e.Error)
		}
	}
	return "none"
}

// startTries bounds the tries of one start.
const startTries = 4

// kill sends SIGKILL to replica r for planned kill k, waits until it is
// reaped, and records the kill and the exit; "" if it landed, else why not
// (a kill_skipped event says so too).
func (c *cluster) kill(r, k int) string {
	c.mu.Lock()
	at := c.since()
	why := ""
	switch {
	case !c.up[r]:
		why = chaosplan.SkipDown
	case c.cause[r] != "" || c.be.exited(r):
		why = chaosplan.SkipCrashed
	default:
		c.cause[r] = causeNemesis
	}
	c.mu.Unlock()
	if why != "" {
		c.skip(r, k, why)
		return why
	}
	c.be.kill(r)
	code := c.be.collect(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up[r] = false
	exit := c.event(EventExit, r, c.since())
	exit.ExitCode = code
	if c.be.crashCode(code) { // a crash fault won the race: no kill happened
		skip := c.event(EventKillSkipped, r, c.since())
		skip.Planned, skip.Error = k, chaosplan.SkipCrashed
		c.events = append(c.events, exit, skip)
		return chaosplan.SkipCrashed
	}
	kill := c.event(EventKill, r, at)
	kill.Planned = k
	c.events = append(c.events, kill, exit)
	return ""
}

// event is an event of replica r's last process at, not of the kill
// plan; the caller holds c.mu.
func (c *cluster) event(kind ServerKind, r int, at int64) ServerEvent {
	return ServerEvent{Kind: kind, Replica: r, AtUS: at, PID: c.pids[r], Addr: c.addrs[r], Planned: -1}
}

// skip records that planned kill k of replica r did not land, and why.
func (c *cluster) skip(r, k int, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.event(EventKillSkipped, r, c.since())
	e.Planned, e.Error = k, why
	c.events = append(c.events, e)
}

// faultKill is told, before the kill, that a fault (the proxy's hold and
// kill, the sink's kill) kills replica r: it records a fault_kill event,
// unless the nemesis claimed the process first.
func (c *cluster) faultKill(r int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.up[r] || c.cause[r] != "" {
		return
	}
	c.cause[r] = causeFault
	c.events = append(c.events, c.event(EventFaultKill, r, c.since()))
}

// reap finds replicas whose process exited on its own (or a fault killed
// it), records the exit and marks them down; it returns them.
func (c *cluster) reap() []int {
	var out []int
	for r, u := range c.running() {
		if !u || !c.be.exited(r) {
			continue
		}
		c.mu.Lock()
		nemesis := c.cause[r] == causeNemesis
		c.mu.Unlock()
		if nemesis {
			continue // kill collects it
		}
		code := c.be.collect(r)
		c.mu.Lock()
		c.up[r] = false
		e := c.event(EventExit, r, c.since())
		e.ExitCode = code
		c.events = append(c.events, e)
		c.mu.Unlock()
		out = append(out, r)
	}
	return out
}

// stopAll stops every running replica with SIGTERM and records how each
// ended; one that does not exit in time is killed.
func (c *cluster) stopAll() {
	c.reap()
	var wg sync.WaitGroup
	for r, u := range c.running() {
		if !u {
			continue
		}
		wg.Go(func() {
			at := c.since()
			code, err := c.be.stop(r)
			c.mu.Lock()
			e := c.event(EventStop, r, at)
			e.ExitCode = code
			if err != nil {
				e.Error = short(err.Error())
			}
			c.up[r] = false
			c.events = append(c.events, e)
			c.mu.Unlock()
		})
	}
	wg.Wait()
}

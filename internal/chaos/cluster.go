package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"idemlab/internal/audit/chaosplan"
)

// A cluster owns the replicas' processes through a backend and records
// every start, kill and exit as a ServerEvent. Only the supervisor (and
// Run, before and after it) starts or stops replicas; clients only read
// URLs. A replica keeps its URL for the run (a restart asks for its old
// port), so a client reaches that replica or nothing, never another that
// happened to get the port.
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

// start starts replica r, which must be down, on its old port if it had
// one (the last try takes any), recording each failure.
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

// kill SIGKILLs replica r for planned kill k and reaps it; "" if it
// landed, else why not (recorded as kill_skipped).
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

// event is an event of replica r's last process; the caller holds c.mu.
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

// faultKill records, before the kill, that a fault kills replica r, unless
// the nemesis claimed the process first.
func (c *cluster) faultKill(r int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.up[r] || c.cause[r] != "" {
		return
	}
	c.cause[r] = causeFault
	c.events = append(c.events, c.event(EventFaultKill, r, c.since()))
}

// reap records and returns the replicas whose process exited on its own or
// by a fault.
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

// stopAll stops every running replica with SIGTERM (then SIGKILL).
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

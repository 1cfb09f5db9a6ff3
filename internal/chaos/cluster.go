package chaos

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store"
)

// A cluster owns the replicas' server processes: it starts them, kills
// them for the nemesis, notices when one exits on its own (a crash fault),
// restarts them on the same state, and records each of these as a
// ServerEvent. Only the supervisor goroutine (and Run, before and after it)
// starts or stops servers; clients only read addresses.
//
// A replica keeps its address for the whole run: a restart asks for the
// port it had, so a client holding the address reaches that replica or
// nothing (refused), never another replica that happened to get the port.
// If the port was taken meanwhile, the replica gets a new one; the event
// says so.
type cluster struct {
	cfg    Config
	began  time.Time
	places []store.Place // per replica

	mu      sync.Mutex
	servers []*serverproc.Server // per replica; nil while down
	addrs   []string             // per replica, the last address
	events  []ServerEvent
}

func newCluster(cfg Config, began time.Time, places []store.Place) *cluster {
	return &cluster{cfg: cfg, began: began, places: places,
		servers: make([]*serverproc.Server, len(places)), addrs: make([]string, len(places))}
}

func (c *cluster) since() int64 { return time.Since(c.began).Microseconds() }

func (c *cluster) record(e ServerEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

// addr returns the address of replica r ("" before its first start).
func (c *cluster) addr(r int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[r]
}

// up reports which replicas are running.
func (c *cluster) up() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]bool, len(c.servers))
	for i, s := range c.servers {
		out[i] = s != nil
	}
	return out
}

// args are the server flags of replica r listening on addr.
func (c *cluster) args(r int, addr string) []string {
	p := c.places[r]
	args := []string{"-addr", addr, "-store", string(c.cfg.Store)}
	if c.cfg.Store.InDatabase() {
		args = append(args, "-dsn", p.DSN)
	} else {
		args = append(args, "-state", p.Dir)
	}
	return append(args,
		"-capacity", strconv.Itoa(c.cfg.MaxIntents),
		"-wait", c.cfg.ServerWait.String(),
		"-faults")
}

// start starts replica r, which must be down: on its old port if it had
// one, else (or if that port is taken) on any free port. It tries a few
// times; each failure is recorded. The error is the last failure.
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
		addr := c.addr(r)
		if addr == "" || try == startTries-1 {
			addr = protocol.DefaultAddr // the last try takes any port
		}
		s, err := serverproc.Start(ctx, c.cfg.ServerPath, c.args(r, addr), c.cfg.ReadyWithin)
		if err != nil {
			last = fmt.Errorf("start replica %d: %w", r, err)
			c.record(ServerEvent{Kind: EventStartFailed, Replica: r, AtUS: c.since(), Addr: addr, Error: short(err.Error())})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		c.mu.Lock()
		c.servers[r] = s
		c.addrs[r] = s.Addr
		c.events = append(c.events, ServerEvent{Kind: EventStart, Replica: r, AtUS: c.since(), PID: s.PID, Addr: s.Addr})
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

// kill sends SIGKILL to replica r, waits until it is reaped, and records
// the kill and the exit. It does nothing to a replica that is down.
func (c *cluster) kill(r int) bool {
	c.mu.Lock()
	s := c.servers[r]
	c.mu.Unlock()
	if s == nil {
		return false
	}
	at := c.since()
	if s.Exited() { // it crashed first: let reap record it
		return false
	}
	s.Kill()
	code, _ := s.AwaitExit(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servers[r] = nil
	exit := ServerEvent{Kind: EventExit, Replica: r, AtUS: c.since(), PID: s.PID, Addr: s.Addr, ExitCode: code}
	if code == protocol.CrashExitCode { // a crash fault won the race: no kill happened
		c.events = append(c.events, exit)
		return false
	}
	c.events = append(c.events, ServerEvent{Kind: EventKill, Replica: r, AtUS: at, PID: s.PID, Addr: s.Addr}, exit)
	return true
}

// reap finds replicas whose server exited on its own, records the exit
// and marks them down; it returns them.
func (c *cluster) reap() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for r, s := range c.servers {
		if s == nil || !s.Exited() {
			continue
		}
		code, _ := s.AwaitExit(0)
		c.servers[r] = nil
		c.events = append(c.events, ServerEvent{Kind: EventExit, Replica: r, AtUS: c.since(), PID: s.PID, Addr: s.Addr, ExitCode: code})
		out = append(out, r)
	}
	return out
}

// stopAll stops every running replica with SIGTERM and records how each
// ended; a server that does not exit within StopWithin is killed (code 137, SIGKILL).
func (c *cluster) stopAll() {
	c.reap()
	var wg sync.WaitGroup
	for r := range c.servers {
		c.mu.Lock()
		s := c.servers[r]
		c.mu.Unlock()
		if s == nil {
			continue
		}
		wg.Go(func() {
			at := c.since()
			code, err := s.Stop(c.cfg.StopWithin)
			e := ServerEvent{Kind: EventStop, Replica: r, AtUS: at, PID: s.PID, Addr: s.Addr, ExitCode: code}
			if err != nil {
				e.Error = short(err.Error())
			}
			c.mu.Lock()
			c.servers[r] = nil
			c.events = append(c.events, e)
			c.mu.Unlock()
		})
	}
	wg.Wait()
}

// killAll is the last resort on every path out of Run.
func (c *cluster) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r, s := range c.servers {
		if s != nil {
			s.Kill()
			c.servers[r] = nil
		}
	}
}

// short cuts an error text to a bounded length for the history.
func short(s string) string {
	const n = 160
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

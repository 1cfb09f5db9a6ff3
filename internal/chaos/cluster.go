package chaos

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/client"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store"
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

// A backend runs one kind of replica. start starts replica r, which is
// down, and returns its process's id and address and the URL clients call
// (old is the URL it had, "" before its first start; fresh asks for any
// port). exited reports whether its process exited; kill sends SIGKILL and
// returns once it exited; collect returns the exit code of a process that
// exited; stop sends SIGTERM and waits (then SIGKILL); closeAll is the last
// resort on every path out of a run.
type backend interface {
	start(ctx context.Context, r int, old string, fresh bool) (pid int, addr, url string, err error)
	exited(r int) bool
	kill(r int)
	collect(r int) int
	stop(r int) (int, error)
	// cleanStop reports whether code is how a process ends on the final
	// SIGTERM when all is well.
	cleanStop(code int) bool
	// crashCode reports whether code is an exit a crash fault caused by
	// itself (the lab's server exits 23; a target is killed, not exited).
	crashCode(code int) bool
	closeAll()
}

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

// short cuts an error text to a bounded length for the history.
func short(s string) string {
	const n = 160
	if t := safeText(s, n); t != s {
		return t + "…"
	}
	return s
}

// storeBackend runs effectserver replicas on one store.
type storeBackend struct {
	cfg    Config
	places []store.Place // per replica

	mu      sync.Mutex
	servers []*serverproc.Server // per replica; nil while down
}

func newStoreBackend(cfg Config, places []store.Place) *storeBackend {
	return &storeBackend{cfg: cfg, places: places, servers: make([]*serverproc.Server, len(places))}
}

func (b *storeBackend) server(r int) *serverproc.Server {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.servers[r]
}

// args are the server flags of replica r listening on addr.
func (b *storeBackend) args(r int, addr string) []string {
	p := b.places[r]
	args := []string{"-addr", addr, "-store", string(b.cfg.Store)}
	if b.cfg.Store.InDatabase() {
		args = append(args, "-dsn", p.DSN)
	} else {
		args = append(args, "-state", p.Dir)
	}
	return append(args,
		"-capacity", strconv.Itoa(b.cfg.MaxIntents),
		"-wait", b.cfg.ServerWait.String(),
		"-faults")
}

func (b *storeBackend) start(ctx context.Context, r int, old string, fresh bool) (int, string, string, error) {
	addr := protocol.DefaultAddr
	if !fresh {
		addr = addrOf(old)
	}
	s, err := serverproc.Start(ctx, b.cfg.ServerPath, b.args(r, addr), b.cfg.ReadyWithin)
	if err != nil {
		return 0, addr, "", err
	}
	b.mu.Lock()
	b.servers[r] = s
	b.mu.Unlock()
	return s.PID, s.Addr, client.EffectURL(s.Addr), nil
}

// addrOf is the host:port of an effect URL.
func addrOf(url string) string {
	const pre = "http://"
	rest := url[len(pre):]
	return rest[:len(rest)-len(protocol.EffectPath)]
}

func (b *storeBackend) exited(r int) bool {
	s := b.server(r)
	return s != nil && s.Exited()
}

func (b *storeBackend) kill(r int) {
	if s := b.server(r); s != nil {
		s.Kill()
	}
}

func (b *storeBackend) collect(r int) int {
	b.mu.Lock()
	s := b.servers[r]
	b.servers[r] = nil
	b.mu.Unlock()
	if s == nil {
		return 0
	}
	code, _ := s.AwaitExit(b.cfg.StopWithin)
	return code
}

func (b *storeBackend) stop(r int) (int, error) {
	b.mu.Lock()
	s := b.servers[r]
	b.servers[r] = nil
	b.mu.Unlock()
	if s == nil {
		return 0, nil
	}
	return s.Stop(b.cfg.StopWithin)
}

func (b *storeBackend) cleanStop(code int) bool { return code == 0 }
func (b *storeBackend) crashCode(code int) bool { return code == protocol.CrashExitCode }

func (b *storeBackend) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for r, s := range b.servers {
		if s != nil {
			s.Kill()
			b.servers[r] = nil
		}
	}
}

// targetBackend runs a target's replicas through caserun.TargetReplicas,
// each behind its proxy (the URL clients call), calling the sink.
type targetBackend struct {
	tr *caserun.TargetReplicas
}

func (b *targetBackend) start(ctx context.Context, r int, _ string, _ bool) (int, string, string, error) {
	if err := b.tr.Start(ctx, r); err != nil {
		return 0, "", "", err
	}
	pid, addr := b.tr.Process(r)
	return pid, addr, b.tr.ProxyURL(r), nil
}

func (b *targetBackend) exited(r int) bool { return b.tr.Exited(r) }
func (b *targetBackend) kill(r int)        { b.tr.Kill(r) }

func (b *targetBackend) collect(r int) int {
	code, _, _, _ := b.tr.Stop(r, casefile.StopAwaitExit)
	return code
}

func (b *targetBackend) stop(r int) (int, error) {
	code, _, _, err := b.tr.Stop(r, casefile.StopSIGTERM)
	return code, err
}

// cleanStop: a target ends on SIGTERM by exiting 0 or by the signal
// itself (143), as most runtimes do by default.
func (b *targetBackend) cleanStop(code int) bool { return code == 0 || code == TermExitCode }

// crashCode: a fault kills a target (recorded as fault_kill); no exit
// code of its own says "crashed".
func (b *targetBackend) crashCode(int) bool { return false }
func (b *targetBackend) closeAll()          { b.tr.Close() }

// TermExitCode is the exit status of a process SIGTERM ended (128+15).
const TermExitCode = 143

package caserun

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"idemlab/internal/casefile"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/target"
)

// This file shares a target's processes between the cases that need none
// of their own (docs/targets.md, "Shared processes"). Starting a Node
// process costs 0.3 to 0.9 s of CPU; about 10 of a target's cases neither
// restart, stop nor crash a process, run one replica and set no capacity,
// so they run, one at a time, on a process the pool keeps. Each run keeps
// apart what a fresh process would: its keys begin with a prefix drawn for
// the run (as on an attached target), and it has a sink of its own, with a
// fresh journal. The process's effect URL names a relay that lives as long
// as the process and forwards each call to the sink of the run at hand:
// a sink closed between runs would close the connections the process keeps
// to it, and a client that reuses a closed one (fasthttp's, Fiber's) fails
// the next run's first effect, a failure of the lab's making.

// Shareable reports whether case c may run on a process of t that other
// cases run on: t is started by the lab, performs its effects through the
// sink and claims no capacity (a bounded store fills with other runs'
// keys); c runs one replica, never restarts, stops or crashes it, and
// sets neither a capacity nor a key TTL (each fills the command line or
// depends on a fresh clock). The audit decides again (audit/targets.go).
func Shareable(c casefile.Case, t *target.Target) bool {
	return t.Attach == nil && t.Effects.Sink && t.Claims.Capacity == nil &&
		c.Replicas <= 1 && !needsProcessControl(c) && !slices.ContainsFunc(c.Steps, func(s casefile.Step) bool { return s.Start != nil }) &&
		c.Server.Capacity == 0 && c.Server.KeyTTLMS == 0
}

// SharedProcess is a process of a target that several runs shared, as
// each of them records it.
type SharedProcess struct {
	PID      int `json:"pid"`
	ReadyIn  MS  `json:"ready_ms"`
	Runs     int `json:"runs"`      // the runs that ran on it, once the pool closed
	ExitCode int `json:"exit_code"` // once the pool closed: at SIGTERM, or the exit it made by itself
}

// A Pool keeps the processes of one target that Shareable cases run on, at
// most one run on a process at a time. Close ends them: the runs' records
// are complete only then.
type Pool struct {
	cfg TargetConfig
	ctx context.Context // the processes' lifetime: a run's context ends with the run

	mu   sync.Mutex
	idle []*sharedProcess
	all  []*sharedProcess
	sink *relay // an attached target's, once its first run listened
}

// NewPool returns an empty pool for cfg.Target (cfg.Pool is ignored),
// whose processes and side services are killed when ctx ends, if Close
// did not end them before.
func NewPool(ctx context.Context, cfg TargetConfig) *Pool {
	cfg.Pool = nil
	return &Pool{cfg: cfg, ctx: ctx}
}

// sharedProcess is one process of a pool, with its folder, its side
// services and the address its effect URL names.
type sharedProcess struct {
	dir      string
	services sideServices
	proc     *serverproc.Server
	relay    *relay
	rec      *SharedProcess
	logSeen  int
	ended    bool
}

// run runs c on a process of the pool.
func (p *Pool) run(ctx context.Context, cfg TargetConfig, c casefile.Case) (Observed, TargetDetail, error) {
	m, err := p.take()
	if err != nil {
		return Observed{Case: c.Name, ExitCodes: []int{}, Calls: []Call{}}, TargetDetail{},
			fmt.Errorf("case %s on target %s: a shared process: %w", c.Name, cfg.Target.Name, err)
	}
	obs, det, err := runTarget(ctx, cfg, c, m)
	p.put(m, err)
	return obs, det, err
}

// take returns an idle process that still runs, or starts one. A process
// taken or ended is the caller's alone: it is ended outside the pool's
// lock, so that one process's stop (up to its target's grace) holds up no
// other run's take or put.
func (p *Pool) take() (*sharedProcess, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		m := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if !m.proc.Exited() {
			return m, nil
		}
		m.end(p.cfg.Target) // it exited between two runs: its exit is recorded
	}
	m, err := p.start(p.ctx)
	if m != nil {
		p.mu.Lock()
		p.all = append(p.all, m)
		p.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// start starts a process for the pool: in a folder of its own, with its
// side services, its effect URL at an address each run's sink listens on.
func (p *Pool) start(ctx context.Context) (*sharedProcess, error) {
	t := p.cfg.Target
	dir, err := os.MkdirTemp(p.cfg.StateRoot, "shared-"+t.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("make state folder: %w", err)
	}
	m := &sharedProcess{dir: dir, rec: &SharedProcess{}}
	v := target.Vars{State: dir, EffectServer: p.cfg.EffectServer, Capacity: protocol.DefaultCapacity}
	if err := m.services.start(ctx, t, p.cfg.Databases, dir, &v); err != nil {
		m.end(t)
		return m, err
	}
	if m.relay, err = startRelay(""); err != nil {
		m.end(t)
		return m, err
	}
	v.EffectURL = m.relay.url
	if m.proc, err = startProcess(ctx, t, v); err != nil {
		m.end(t)
		return m, err
	}
	m.rec.PID, m.rec.ReadyIn = m.proc.PID, MS(m.proc.ReadyIn)
	return m, nil
}

// put returns m to the pool after a run that ended with err; a run that
// failed, or a process that exited, ends it.
func (p *Pool) put(m *sharedProcess, err error) {
	p.mu.Lock()
	m.rec.Runs++
	keep := err == nil && !m.proc.Exited()
	if keep {
		p.idle = append(p.idle, m)
	}
	p.mu.Unlock()
	if !keep {
		m.end(p.cfg.Target)
	}
}

// attachedSink is the relay at an attached target's sink_addr, listening
// from the target's first run until Close: the address its user gave the
// service is bound once for the whole run of the lab, not again for each
// case, when another socket could take it in between ("address already in
// use", a failure of the lab's making that TestAttachedService met twice in
// about ten runs of the whole suite).
func (p *Pool) attachedSink() (*relay, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sink == nil {
		r, err := startRelay(p.cfg.Target.Attach.SinkAddr)
		if err != nil {
			return nil, &TargetFault{Err: fmt.Errorf("the effect sink at attach.sink_addr %s (the service's effect URL): %w", p.cfg.Target.Attach.SinkAddr, err)}
		}
		p.sink = r
	}
	return p.sink, nil
}

// Close ends every process of the pool at once (SIGTERM, then SIGKILL
// after the target's grace) and records each one's exit in the runs that
// shared it, and stops an attached target's relay. The runs are over: no
// process is in use.
func (p *Pool) Close() {
	p.mu.Lock()
	all := p.all
	p.idle = nil
	if p.sink != nil {
		p.sink.close()
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range all {
		wg.Go(func() { m.end(p.cfg.Target) })
	}
	wg.Wait()
}

// Served reports the processes the pool started and the runs they served.
func (p *Pool) Served() (processes, runs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.all {
		runs += m.rec.Runs
	}
	return len(p.all), runs
}

// end stops m's process and side services and removes its folder; safe
// to call again.
func (m *sharedProcess) end(t *target.Target) {
	if m.ended {
		return
	}
	m.ended = true
	if m.proc != nil {
		code, _ := m.proc.Stop(t.Start.StopGrace)
		m.rec.ExitCode = code
	}
	if m.relay != nil {
		m.relay.close()
	}
	m.services.close()
	os.RemoveAll(m.dir)
}

// attach is m as the run sees it: a running service at its address; the
// run's sink listens at a free port, which m's relay forwards to.
func (m *sharedProcess) attach() *target.Attach {
	return &target.Attach{URL: "http://" + m.proc.Addr, Upstream: m.proc.Addr}
}

// newLog returns the lines the process printed since the last call,
// marked as the shared process's. Its log keeps the first lines only
// (serverproc), then one line saying how many more it did not keep.
func (m *sharedProcess) newLog() []string {
	lines := m.proc.Log()
	if n := len(lines); n > 0 && strings.HasSuffix(lines[n-1], " more lines not kept)") && strings.HasPrefix(lines[n-1], "(") {
		lines = lines[:n-1]
	}
	var out []string
	for _, l := range lines[min(m.logSeen, len(lines)):] {
		out = append(out, fmt.Sprintf("shared process %d: %s", m.proc.PID, l))
	}
	m.logSeen = len(lines)
	return out
}

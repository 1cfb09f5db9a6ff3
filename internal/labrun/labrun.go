// Package labrun runs one case on one store: a fresh state folder, a real
// effectserver subprocess, the case's steps as real loopback HTTP calls,
// restarts and crashes, and at the end the counter read from the server's
// state after it has exited. It returns what was observed; it does not judge.
package labrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"idemlab/internal/caseplan"
	"idemlab/internal/observation"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/statedir"
)

// Protocol holds the constants the lab runs every server and client with.
// They are recorded in the manifest.
type Protocol struct {
	Capacity      int           // -capacity: keys the registry holds
	MaxBody       int           // -max-body: bytes
	Wait          time.Duration // -wait: how long a duplicate waits for its owner
	ClientTimeout time.Duration // how long a client waits for a reply
	ReadyWithin   time.Duration // how long a server may take to print READY
	StopWithin    time.Duration // how long a server may take to exit
}

// DefaultProtocol is what the committed evidence was made with: the
// protocol's defaults, and bounds on a server's start and stop.
var DefaultProtocol = Protocol{
	Capacity:      protocol.DefaultCapacity,
	MaxBody:       protocol.DefaultMaxBody,
	Wait:          protocol.DefaultWait,
	ClientTimeout: protocol.DefaultClientTimeout,
	ReadyWithin:   10 * time.Second,
	StopWithin:    10 * time.Second,
}

// Config says how to run: which server binary, where state folders go.
type Config struct {
	ServerPath string   // the effectserver binary
	StateRoot  string   // parent of each run's fresh state folder
	Protocol   Protocol // constants

	// UnsafeRegistry, when not protocol.Sound, starts every server with this
	// deliberately broken registry (effectserver -unsafe-registry): a
	// mutation run.
	UnsafeRegistry protocol.Flaw
}

// Detail is what varies between runs of the same case: it goes to run.json.
type Detail struct {
	Wall      time.Duration
	Servers   []ServerDetail
	Calls     []CallDetail // in the order of the observed calls
	ServerLog []string
}

// ServerDetail is one server process of a run.
type ServerDetail struct {
	PID      int
	Addr     string
	ReadyIn  time.Duration
	ExitCode int
}

// CallDetail is the varying part of one call.
type CallDetail struct {
	Latency time.Duration
	Error   string // the client's raw error text; empty on a reply
	Client  int    // launch index within its concurrent group
}

// Run runs case c on store. An error means the lab itself broke (a server
// never became ready, a state folder could not be made); anything the server
// does wrong is an observation, not an error.
func Run(ctx context.Context, cfg Config, c caseplan.Case, store protocol.Store) (observation.Run, Detail, error) {
	began := time.Now()
	obs := observation.Run{Case: c.Name, Store: store, ExitCodes: []int{}, Calls: []observation.Call{}}
	var det Detail
	state, err := os.MkdirTemp(cfg.StateRoot, c.Name+"-"+string(store)+"-")
	if err != nil {
		return obs, det, fmt.Errorf("case %s on %s: make state folder: %w", c.Name, store, err)
	}
	defer os.RemoveAll(state)

	r := &run{cfg: cfg, store: store, state: state, obs: &obs, det: &det, client: protocol.NewClient(cfg.Protocol.ClientTimeout)}
	defer r.killServer()
	if err := r.execute(ctx, c); err != nil {
		return obs, det, fmt.Errorf("case %s on %s: %w", c.Name, store, err)
	}
	st, err := statedir.Read(store, statedir.Place{Dir: state})
	if err != nil {
		return obs, det, fmt.Errorf("case %s on %s: %w", c.Name, store, err)
	}
	obs.Counter = st.Counter
	det.Wall = time.Since(began)
	return obs, det, nil
}

// run is the state of one case execution.
type run struct {
	cfg    Config
	store  protocol.Store
	state  string
	obs    *observation.Run
	det    *Detail
	client *protocol.Client
	server *serverproc.Server // the current server; nil between stop and start
}

func (r *run) execute(ctx context.Context, c caseplan.Case) error {
	if err := r.startServer(ctx); err != nil {
		return err
	}
	for i, step := range c.Steps {
		var err error
		switch {
		case step.Call != nil:
			r.sequential(ctx, i, *step.Call)
		case step.Concurrent != nil:
			r.concurrent(ctx, i, *step.Concurrent)
		case step.Restart != nil:
			err = r.restart(ctx, step.Restart.Stop)
		default:
			err = errors.New("empty step") // the schema forbids it
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
	}
	r.stopServer(caseplan.StopSIGTERM)
	return nil
}

func (r *run) startServer(ctx context.Context) error {
	p := r.cfg.Protocol
	args := []string{
		"-state", r.state,
		"-addr", protocol.DefaultAddr,
		"-store", string(r.store),
		"-capacity", strconv.Itoa(p.Capacity),
		"-max-body", strconv.Itoa(p.MaxBody),
		"-wait", p.Wait.String(),
		"-faults",
	}
	if r.cfg.UnsafeRegistry != protocol.Sound {
		args = append(args, "-unsafe-registry", string(r.cfg.UnsafeRegistry))
	}
	s, err := serverproc.Start(ctx, r.cfg.ServerPath, args, p.ReadyWithin)
	if err != nil {
		return fmt.Errorf("start effectserver: %w", err)
	}
	r.server = s
	return nil
}

// stopServer ends the current server the way the case says and records its
// exit code. A server that has to be killed is recorded with code -1: an
// observation the audit will flag, not a broken lab.
func (r *run) stopServer(how caseplan.Stop) {
	s := r.server
	r.server = nil
	var code int
	var err error
	switch how {
	case caseplan.StopAwaitExit:
		code, err = s.AwaitExit(r.cfg.Protocol.StopWithin)
	case caseplan.StopSIGTERM:
		code, err = s.Stop(r.cfg.Protocol.StopWithin)
	default: // the schema allows no other; stop it anyway, and say so
		code, err = s.Stop(r.cfg.Protocol.StopWithin)
		err = errors.Join(fmt.Errorf("unknown stop %q: stopped with SIGTERM", how), err)
	}
	r.obs.ExitCodes = append(r.obs.ExitCodes, code)
	r.det.Servers = append(r.det.Servers, ServerDetail{PID: s.PID, Addr: s.Addr, ReadyIn: s.ReadyIn, ExitCode: code})
	for _, line := range s.Log() {
		r.det.ServerLog = append(r.det.ServerLog, fmt.Sprintf("server %d: %s", len(r.det.Servers)-1, line))
	}
	if err != nil {
		r.det.ServerLog = append(r.det.ServerLog, "runner: "+err.Error())
	}
}

func (r *run) restart(ctx context.Context, how caseplan.Stop) error {
	r.stopServer(how)
	return r.startServer(ctx)
}

// killServer is the last resort on every path out of Run.
func (r *run) killServer() {
	if r.server != nil {
		r.server.Kill()
	}
}

func (r *run) url() string { return protocol.EffectURL(r.server.Addr) }

// request is repetition i of a case's call.
func request(c caseplan.Call, i int) protocol.Request {
	return protocol.Request{Key: c.KeyFor(i), Fault: c.Fault, Body: c.BodyFor(i)}
}

func (r *run) sequential(ctx context.Context, step int, call caseplan.Call) {
	for i := range max(call.Repeat, 1) {
		o, d := r.call(ctx, request(call, i))
		o.Step = step
		r.record(o, d)
	}
}

// concurrent releases every client of the group at once and records the
// group in canonical order; the launch index of each goes to run.json.
func (r *run) concurrent(ctx context.Context, step int, g caseplan.Concurrent) {
	for i := range max(g.Call.Repeat, 1) {
		obs, dets := r.group(ctx, request(g.Call, i), g.Clients)
		perm := observation.SortCanonical(obs)
		for j, o := range obs {
			o.Step = step
			d := dets[perm[j]]
			d.Client = perm[j]
			r.record(o, d)
		}
	}
}

func (r *run) record(o observation.Call, d CallDetail) {
	r.obs.Calls = append(r.obs.Calls, o)
	r.det.Calls = append(r.det.Calls, d)
}

// call makes one call and records what came back in the stable shape of
// results.json, and what varies in the detail.
func (r *run) call(ctx context.Context, req protocol.Request) (observation.Call, CallDetail) {
	o := observation.Call{Key: req.Key}
	if req.Fault != "" {
		f := req.Fault
		o.Fault = &f
	}
	began := time.Now()
	rep, err := r.client.Post(ctx, r.url(), req)
	d := CallDetail{Latency: time.Since(began)}
	if err != nil {
		o.Outcome = protocol.Classify(err)
		d.Error = err.Error()
		return o, d
	}
	o.Outcome = protocol.OutcomeReply
	o.Status = &rep.Status
	body := string(rep.Body)
	o.Body = &body
	o.Replayed = rep.Replayed
	return o, d
}

// group makes n identical calls released together and returns them in
// launch order.
func (r *run) group(ctx context.Context, req protocol.Request, n int) ([]observation.Call, []CallDetail) {
	obs := make([]observation.Call, n)
	dets := make([]CallDetail, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			obs[i], dets[i] = r.call(ctx, req)
		})
	}
	close(start)
	wg.Wait()
	return obs, dets
}

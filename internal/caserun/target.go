package caserun

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/client"
	"idemlab/internal/protocol"
	"idemlab/internal/proxy"
	"idemlab/internal/serverproc"
	"idemlab/internal/sink"
	"idemlab/internal/store"
	"idemlab/internal/target"
)

// TargetConfig says how to run cases on one target.
type TargetConfig struct {
	Target        *target.Target
	StateRoot     string        // parent of each run's fresh folder
	EffectServer  string        // the lab's own server binary, for {effectserver}
	Databases     Databases     // the postgres service's database per run; nil where there is none
	ClientTimeout time.Duration // how long a client waits for a reply
	Capacity      int           // fills {capacity}: what the lab gives its own server (RunTarget: the case's)
	Pool          *Pool         // nil: every run starts its own processes
}

// TargetDetail is what varies between runs of a case on a target: a store
// run's Detail, the sink's journal (its effects and replays) and the
// proxy's exchanges.
type TargetDetail struct {
	Detail
	Journal   []sink.Entry
	Exchanges []proxy.Exchange
	SinkCalls []sink.Call    // what the sink did with each call of the target (the first MaxSinkCalls)
	KeyPrefix string         // on an attached target or a shared process, what every key of the run began with: unique to the run
	Shared    *SharedProcess // the shared process the run ran on; nil: processes of its own
}

// MaxSinkCalls bounds the sink's per-call records a run keeps: a case
// makes a few dozen calls; a target calling the sink in a loop (chaos)
// must not grow the runner's memory.
const MaxSinkCalls = 1000

// countWithin bounds a target's count command.
const countWithin = 30 * time.Second

// noKeyHeader is where the sink reads a key where none must reach it: a
// header no target sends.
const noKeyHeader = "X-Idemlab-Unforwarded"

// RunTarget runs case c on cfg.Target. An error means the lab could not
// run it (the target never got ready, a side service or the count command
// failed); anything the target does wrong is an observation. With a Pool,
// a case that needs no process of its own (Shareable) runs on one of the
// pool's processes, its keys and sink journal its own.
func RunTarget(ctx context.Context, cfg TargetConfig, c casefile.Case) (obs Observed, det TargetDetail, err error) {
	if cfg.Pool != nil && Shareable(c, cfg.Target) {
		return cfg.Pool.run(ctx, cfg, c)
	}
	return runTarget(ctx, cfg, c, nil)
}

// runTarget runs case c on cfg.Target: on processes of its own, or on the
// shared process m (non-nil), which the run treats as an attached service.
func runTarget(ctx context.Context, cfg TargetConfig, c casefile.Case, m *sharedProcess) (obs Observed, det TargetDetail, err error) {
	t := cfg.Target
	defer func() {
		if err != nil {
			err = fmt.Errorf("case %s on target %s: %w", c.Name, t.Name, err)
		}
	}()
	began := time.Now()
	obs = Observed{Case: c.Name, ExitCodes: []int{}, Calls: []Call{}}
	root, err := os.MkdirTemp(cfg.StateRoot, c.Name+"-"+t.Name+"-")
	if err != nil {
		return obs, det, fmt.Errorf("make state folder: %w", err)
	}
	defer os.RemoveAll(root)
	cfg.Capacity = cmp.Or(c.Server.Capacity, protocol.DefaultCapacity)
	tt := *t
	if !SinkReadsKeys(c) {
		tt.Effects.KeyHeader = noKeyHeader
	}
	if m != nil {
		tt.Attach, tt.Services = m.attach(), nil
		det.Shared = m.rec
	}
	cfg.Target = &tt
	tr, err := StartTargetReplicas(ctx, cfg, root, c.Replicas, nil)
	if tr != nil {
		defer tr.Close()
	}
	if err != nil {
		return obs, det, err
	}
	relay, done, err := effectRelay(cfg, m)
	defer done()
	if err != nil {
		return obs, det, err
	}
	if relay != nil {
		relay.point(tr.sink.URL(0))
		defer relay.point("")
	}

	r := &run{reps: tr, obs: &obs, det: &det.Detail, client: client.New(cfg.ClientTimeout), c: c,
		shape: &client.Shape{Method: t.Request.Method, KeyHeader: t.Request.KeyHeader, ContentType: t.Request.ContentType},
		key:   t.Request.KeyFormat.Key, observe: observer(t)}
	if tt.Attach != nil {
		// A service that outlives the run keeps its keys: a key of an
		// earlier run must not answer for this one.
		det.KeyPrefix = rand.Text()[:8] + "-"
		r.key = func(k string) string { return t.Request.KeyFormat.Key(det.KeyPrefix + k) }
	}
	err = r.execute(ctx)
	if m != nil {
		det.ServerLog = append(det.ServerLog, m.newLog()...)
	}
	if err != nil {
		return obs, det, err
	}
	if err := ctx.Err(); err != nil {
		return obs, det, fmt.Errorf("interrupted: %w", err)
	}
	if err := tr.Settle(); err != nil {
		return obs, det, err
	}
	det.Exchanges = tr.Exchanges()
	if tr.sink != nil {
		tr.sink.Close() // no effect is applied after it
		det.Journal = tr.sink.Journal()
		det.SinkCalls = tr.SinkCalls()
		obs.Counter = int64(len(sink.Effects(det.Journal)))
	} else {
		n, err := tr.countEffects(ctx)
		if err != nil {
			return obs, det, err
		}
		obs.Counter = n
	}
	det.Wall = time.Since(began)
	return obs, det, nil
}

// observer records what of a target's reply the verdict needs: the replay
// marker the target declares (nil where it declares none) and Retry-After.
func observer(t *target.Target) func(client.Reply, *Call) {
	return func(rep client.Reply, o *Call) {
		o.Replayed = nil
		if t.Replay != nil {
			if vs := rep.Header.Values(t.Replay.Header); len(vs) > 0 {
				marked := vs[0] == t.Replay.Value
				o.Replayed = &marked
			}
		}
		if vs := rep.Header.Values("Retry-After"); len(vs) > 0 {
			ra := vs[0]
			o.RetryAfter = &ra
		}
	}
}

// TargetReplicas are one run's processes of a target, each behind its own
// fault proxy, all calling one effect sink (where the target has one), with
// the run's side services: the one place that runs a target's replicas,
// for a case (RunTarget) and for the chaos experiment.
//
// A replica's proxy is made at its first start and kept across restarts
// (a restart points it at the new process), so its URL stays the same for
// the whole run. A replica killed (by Kill, or by a fault the proxy or the
// sink places) counts as running until Stop collects its exit.
type TargetReplicas struct {
	cfg  TargetConfig
	t    *target.Target
	vars target.Vars // the run's; start fills in the replica's own
	sink *sink.Sink  // nil for a target that counts its own effects

	// faultKill, when set, is told that a fault (the proxy's hold and
	// kill, the sink's kill) is about to kill replica i.
	faultKill func(i int)

	mu        sync.Mutex
	procs     []*serverproc.Server // per replica; nil while stopped
	proxies   []*proxy.Proxy       // per replica, kept across restarts
	ex        []proxy.Exchange
	sinkCalls []sink.Call // the first MaxSinkCalls

	services sideServices
}

// effectRelay is the relay that forwards the effects of a run on the
// shared process m, or on an attached service, to the run's sink (its
// effect URL outlives the run); nil for a run on processes of its own,
// whose effect URL is its sink's. An attached target's relay is its
// Pool's, or without a Pool the run's own. done ends what the run owns.
func effectRelay(cfg TargetConfig, m *sharedProcess) (r *relay, done func(), err error) {
	switch {
	case m != nil:
		return m.relay, func() {}, nil
	case cfg.Target.Attach == nil:
		return nil, func() {}, nil
	case cfg.Pool != nil:
		r, err = cfg.Pool.attachedSink()
		return r, func() {}, err
	}
	own := NewPool(context.Background(), cfg)
	r, err = own.attachedSink()
	return r, own.Close, err
}

// StartTargetReplicas prepares n replicas of cfg.Target in the run folder
// root: a state folder the replicas share ({state}), the side services
// target.json names, and the effect sink where the target has one; Start
// starts a replica. faultKill, if set, is told of every kill a fault makes,
// just before it. A non-nil result must be closed, even with an error.
func StartTargetReplicas(ctx context.Context, cfg TargetConfig, root string, n int, faultKill func(replica int)) (*TargetReplicas, error) {
	t := cfg.Target
	state := filepath.Join(root, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		return nil, fmt.Errorf("make state folder: %w", err)
	}
	tr := &TargetReplicas{cfg: cfg, t: t, procs: make([]*serverproc.Server, n), proxies: make([]*proxy.Proxy, n),
		vars: target.Vars{State: state, EffectServer: cfg.EffectServer, Capacity: cfg.Capacity}, faultKill: faultKill}
	if err := tr.services.start(ctx, t, cfg.Databases, root, &tr.vars); err != nil {
		return tr, err
	}
	if t.Effects.Sink {
		s, err := sink.Start(sink.Config{Replicas: n, Kill: tr.killByFault, KeyHeader: t.Effects.KeyHeader, Observe: tr.observeSink})
		if err != nil {
			return tr, fmt.Errorf("start the effect sink: %w", err)
		}
		tr.sink = s
	}
	return tr, nil
}

// Count is the number of replicas.
func (tr *TargetReplicas) Count() int { return len(tr.procs) }

// Running reports whether replica i was started and not yet Stopped.
func (tr *TargetReplicas) Running(i int) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.procs[i] != nil // an attached service is no process of the run's
}

// Exited reports whether replica i's process exited, not yet Stopped.
func (tr *TargetReplicas) Exited(i int) bool {
	tr.mu.Lock()
	s := tr.procs[i]
	tr.mu.Unlock()
	return s != nil && s.Exited()
}

// URL is replica i's call URL, through its proxy; "" while it is down.
func (tr *TargetReplicas) URL(i int) string {
	if !tr.Running(i) && tr.t.Attach == nil {
		return ""
	}
	return tr.ProxyURL(i)
}

// ProxyURL is replica i's call URL whether or not it runs (a call while it
// is down is closed unanswered); "" before its first start.
func (tr *TargetReplicas) ProxyURL(i int) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.proxies[i] == nil {
		return ""
	}
	return "http://" + tr.proxies[i].Addr() + tr.t.Request.Path
}

// Process is replica i's process id and address (0 and "" while down).
func (tr *TargetReplicas) Process(i int) (pid int, addr string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if s := tr.procs[i]; s != nil {
		return s.PID, s.Addr
	}
	return 0, ""
}

// sideServices are the side services target.json names, started for a
// run (or a shared process): a redis-server, a PostgreSQL database.
type sideServices struct {
	redis  *target.RedisServer
	dropDB func()
}

// start starts t's side services in root and fills in v's addresses.
func (ss *sideServices) start(ctx context.Context, t *target.Target, dbs Databases, root string, v *target.Vars) error {
	for _, s := range t.Services {
		switch s {
		case target.Redis:
			r, err := target.StartRedis(ctx, root)
			if err != nil {
				return err
			}
			ss.redis, v.RedisURL = r, r.URL
		case target.Postgres:
			if dbs == nil {
				return errors.New("the postgres service: no PostgreSQL at hand")
			}
			dsn, drop, err := newDatabase(ctx, dbs)
			if err != nil {
				return fmt.Errorf("the postgres service: %w", err)
			}
			v.PostgresDSN, ss.dropDB = dsn, drop
		default:
			return fmt.Errorf("unknown side service %q", s)
		}
	}
	return nil
}

// close stops what start started; safe to call again.
func (ss *sideServices) close() {
	if ss.redis != nil {
		ss.redis.Stop()
		ss.redis = nil
	}
	if ss.dropDB != nil {
		ss.dropDB()
		ss.dropDB = nil
	}
}

// Start starts replica i's process and points its proxy at it.
func (tr *TargetReplicas) Start(ctx context.Context, i int) error {
	if tr.Running(i) {
		return fmt.Errorf("start replica %d: already running", i)
	}
	if tr.t.Attach != nil {
		return tr.startProxy(i, tr.t.Attach.Upstream, nil)
	}
	v := tr.vars
	v.Replica = i
	if tr.sink != nil {
		v.EffectURL = tr.sink.URL(i)
	}
	s, err := startProcess(ctx, tr.t, v)
	if err != nil {
		return err
	}
	return tr.startProxy(i, s.Addr, s)
}

// startProcess starts a process of t with v (v.Replica its replica) and
// waits until it is ready; a process that is not is the target's fault,
// but for a port the lab drew that another process took first: that
// start is tried again on another port, up to portTries times.
func startProcess(ctx context.Context, t *target.Target, v target.Vars) (*serverproc.Server, error) {
	for try := 1; ; try++ {
		addr := ""
		if t.Start.ReadyLine == nil || t.Start.ReadyLine.NumSubexp() == 0 {
			port, err := serverproc.FreePort()
			if err != nil {
				return nil, fmt.Errorf("start replica %d: %w", v.Replica, err)
			}
			v.Port = port
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		argv, env := t.Command(v)
		s, err := serverproc.StartSpec(ctx, serverproc.Spec{Path: argv[0], Args: argv[1:], Dir: t.Dir, Env: env,
			ReadyLine: t.Start.ReadyLine, Addr: addr, ReadyHTTP: t.Start.ReadyHTTP, ReadyWithin: t.Start.ReadyWithin, Group: true})
		if _, taken := errors.AsType[*serverproc.PortTakenError](err); taken {
			if try < portTries && ctx.Err() == nil {
				continue
			}
			return nil, fmt.Errorf("start target %s replica %d (%d tries, each on another port): %w", t.Name, v.Replica, try, err)
		}
		if err != nil {
			return nil, &TargetFault{fmt.Errorf("start target %s replica %d: %w", t.Name, v.Replica, err)}
		}
		return s, nil
	}
}

// portTries bounds the starts of a process whose port another took.
const portTries = 3

// startProxy points replica i's proxy at upstream, starting the proxy at
// the replica's first start; s is the replica's process (nil: attached).
func (tr *TargetReplicas) startProxy(i int, upstream string, s *serverproc.Server) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.procs[i] = s
	if p := tr.proxies[i]; p != nil {
		if err := p.SetUpstream(upstream); err != nil {
			tr.procs[i] = nil
			if s != nil {
				s.Kill()
			}
			return fmt.Errorf("point the fault proxy of replica %d at %s: %w", i, upstream, err)
		}
		return nil
	}
	p, err := proxy.Start(proxy.Config{Upstream: upstream, Route: tr.route(i), Kill: func() { tr.killByFault(i) }, Observe: tr.observe})
	if err != nil {
		tr.procs[i] = nil
		if s != nil {
			s.Kill()
		}
		return fmt.Errorf("start the fault proxy of replica %d: %w", i, err)
	}
	tr.proxies[i] = p
	return nil
}

// route places a call's lab fault for replica i's proxy.
func (tr *TargetReplicas) route(i int) func(fault string) (proxy.Route, error) {
	return func(fault string) (proxy.Route, error) {
		p, err := tr.t.Place(fault)
		if err != nil {
			return proxy.Route{}, err
		}
		rt := proxy.Route{Header: p.Header, DropReply: p.DropReply, HoldAndKill: p.HoldAndKill, GiveUp: p.GiveUp}
		if p.Sink != nil {
			if tr.sink == nil {
				return proxy.Route{}, fmt.Errorf("fault %q acts at the sink, and the target has none", fault)
			}
			a := *p.Sink
			if err := a.Validate(); err != nil {
				return proxy.Route{}, fmt.Errorf("fault %q: %w", fault, err)
			}
			rt.Arm = func(body []byte) func() bool { return tr.sink.Arm(i, bytes.Clone(body), a) }
		}
		return rt, nil
	}
}

func (tr *TargetReplicas) observe(x proxy.Exchange) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.ex = append(tr.ex, x)
}

func (tr *TargetReplicas) observeSink(c sink.Call) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.sinkCalls) < MaxSinkCalls {
		tr.sinkCalls = append(tr.sinkCalls, c)
	}
}

// SinkCalls returns what the sink did with each call so far (the first
// MaxSinkCalls).
func (tr *TargetReplicas) SinkCalls() []sink.Call {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]sink.Call(nil), tr.sinkCalls...)
}

// settleWithin bounds the wait for the proxies' exchanges to end once a
// run's last call returned (proxy.closeWait's 10 s).
const settleWithin = 10 * time.Second

// Settle waits until every exchange of the proxies ended and was
// observed, so that the exchanges and the sink's records of a run hold
// the same calls: a client has its reply a moment before the proxy has
// observed its exchange, and a client that gave up leaves the target's
// exchange running.
func (tr *TargetReplicas) Settle() error {
	for i, p := range tr.proxies {
		if p != nil && !p.Settle(settleWithin) {
			return fmt.Errorf("the fault proxy of replica %d: exchanges still running %v after the run's last call", i, settleWithin)
		}
	}
	return nil
}

// Exchanges returns what became of every request the proxies saw so far.
func (tr *TargetReplicas) Exchanges() []proxy.Exchange {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]proxy.Exchange(nil), tr.ex...)
}

// Kill kills replica i's process group and returns once it exited; the
// replica counts as running until Stop.
func (tr *TargetReplicas) Kill(i int) {
	tr.mu.Lock()
	s := tr.procs[i]
	tr.mu.Unlock()
	if s != nil {
		s.Kill()
	}
}

// killByFault is the crash the proxy and the sink inject.
func (tr *TargetReplicas) killByFault(i int) {
	if tr.faultKill != nil {
		tr.faultKill(i)
	}
	tr.Kill(i)
}

// Stop ends replica i the way how says: wait for the exit a kill or a crash
// fault caused, or SIGTERM with the target's grace before SIGKILL.
func (tr *TargetReplicas) Stop(i int, how casefile.Stop) (int, []string, ServerDetail, error) {
	tr.mu.Lock()
	s := tr.procs[i]
	tr.procs[i] = nil
	tr.mu.Unlock()
	if s == nil {
		return 0, nil, ServerDetail{Replica: i}, fmt.Errorf("stop replica %d: not running", i)
	}
	var code int
	var err error
	switch how {
	case casefile.StopAwaitExit:
		code, err = s.AwaitExit(tr.t.Start.StopGrace + time.Second)
	default:
		code, err = s.Stop(tr.t.Start.StopGrace)
	}
	return code, s.Log(), ServerDetail{Replica: i, PID: s.PID, Addr: s.Addr, ReadyIn: MS(s.ReadyIn), ExitCode: code}, err
}

// Journal closes the sink (no effect is applied after it) and returns the
// effects applied, in order, without the sink's replays of forwarded keys;
// nil for a target that counts its own.
func (tr *TargetReplicas) Journal() []sink.Entry {
	if tr.sink == nil {
		return nil
	}
	tr.sink.Close()
	return sink.Effects(tr.sink.Journal())
}

// Close stops every process, proxy, the sink and the side services: the
// last resort on every path out of a run, safe to call again.
func (tr *TargetReplicas) Close() {
	tr.mu.Lock()
	procs := append([]*serverproc.Server(nil), tr.procs...)
	tr.mu.Unlock()
	for _, s := range procs {
		if s != nil {
			s.Kill()
		}
	}
	for _, p := range tr.proxies {
		if p != nil {
			p.Close()
		}
	}
	if tr.sink != nil {
		tr.sink.Close()
	}
	tr.services.close()
}

// countEffects reads the effects applied from the target's count command.
func (tr *TargetReplicas) countEffects(ctx context.Context) (int64, error) {
	argv := tr.t.CountCommand(tr.vars)
	out, err := tr.runAfter(ctx, "count effects", argv)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("count effects (%s): printed %q, want one integer", strings.Join(argv, " "), bytes.TrimSpace(out))
	}
	return n, nil
}

// ReadJournal reads the effects applied from the target's journal command
// (store.State's JSON); a target without one is an error.
func (tr *TargetReplicas) ReadJournal(ctx context.Context) (store.State, error) {
	argv := tr.t.JournalCommand(tr.vars)
	if len(argv) == 0 {
		return store.State{}, fmt.Errorf("target %s has no journal command (effects.journal)", tr.t.Name)
	}
	out, err := tr.runAfter(ctx, "read the journal", argv)
	if err != nil {
		return store.State{}, err
	}
	st, err := parseJournal(out)
	if err != nil {
		return store.State{}, fmt.Errorf("read the journal (%s): %w", strings.Join(argv, " "), err)
	}
	return st, nil
}

// parseJournal reads what a journal command printed: one store.State JSON
// object and nothing after it, its effects valued 1..counter in order.
func parseJournal(out []byte) (store.State, error) {
	var st store.State
	d := json.NewDecoder(bytes.NewReader(out))
	d.DisallowUnknownFields()
	if err := d.Decode(&st); err != nil {
		return store.State{}, err
	}
	if _, err := d.Token(); err != io.EOF {
		return store.State{}, errors.New("more after the journal's JSON object")
	}
	for i, e := range st.Effects {
		if e.Value != int64(i+1) {
			return store.State{}, fmt.Errorf("effect %d has value %d, want %d", i, e.Value, i+1)
		}
	}
	if st.Counter != int64(len(st.Effects)) {
		return store.State{}, fmt.Errorf("counter %d, %d effects", st.Counter, len(st.Effects))
	}
	return st, nil
}

// runAfter runs a command of the target's once every process exited, in its
// folder and environment, and returns what it printed.
func (tr *TargetReplicas) runAfter(ctx context.Context, what string, argv []string) ([]byte, error) {
	// Bounded while read, in a process group killed on return (aftercmd.go).
	stdout, stderr := &serverproc.Head{Max: afterBound(what)}, &serverproc.Tail{Max: maxStderrBytes}
	err := serverproc.Run(ctx, serverproc.Command{Argv: argv, Dir: tr.t.Dir, Env: tr.t.ToolEnv(tr.vars), Within: countWithin, Stdout: stdout, Stderr: stderr})
	if err == nil {
		err = checkAfter(what, stdout.Bytes())
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("%s (%s): %w", what, strings.Join(argv, " "), err) // interrupted: nobody's fault
	case err != nil:
		return nil, &TargetFault{fmt.Errorf("%s (%s): %w%s", what, strings.Join(argv, " "), err, stderrTail(stderr))}
	}
	return stdout.Bytes(), nil
}

// A TargetFault is a failure of the target's own, not the lab's: its
// process did not start, exited before it was ready or was not ready in
// time, or its count or journal command failed or printed no count or
// journal. The runner tells the user so (its exit status 7).
type TargetFault struct{ Err error }

func (e *TargetFault) Error() string { return e.Err.Error() }
func (e *TargetFault) Unwrap() error { return e.Err }

// NotRun says why case c cannot run on target t ("" when it can): no
// target section; a ledger (the sink plays it) on a target without the
// sink; keys expiring after a TTL the target does not claim, or kept longer
// than the one it claims; replicas without a shared store; a capacity or
// body limit not claimed; a fault not placeable. The audit decides again,
// and judges what ran.
func NotRun(c casefile.Case, t *target.Target) string {
	ttl := t.Claims.KeyTTLMS
	switch {
	case c.Target.Sound == "":
		return "the case file has no target section"
	case t.Attach != nil && needsProcessControl(c):
		return target.NoProcessControl
	case c.Ledger != nil && !t.Effects.Sink:
		return "the case's ledger is the effect sink, and the target counts its effects itself"
	case c.Server.KeyTTLMS > 0 && (ttl == nil || *ttl != int64(c.Server.KeyTTLMS)):
		return fmt.Sprintf("the case needs keys that expire after %d ms; the target claims %s", c.Server.KeyTTLMS, claimed(ttl))
	case c.Server.KeyTTLMS == 0 && ttl != nil && int64(c.KeptMS()) >= *ttl:
		return fmt.Sprintf("the case expects a key kept %d ms; the target claims key_ttl_ms %d", c.KeptMS(), *ttl)
	case c.Replicas > 1 && !t.Claims.SharedStore:
		return fmt.Sprintf("the case runs %d replicas; the target claims no shared store", c.Replicas)
	}
	sound := c.Expect[c.Target.Sound].Statuses()
	plan := c.Plan()
	capacity := cmp.Or(c.Server.Capacity, protocol.DefaultCapacity)
	needsCapacity := c.Server.Capacity > 0
	for i, status := range sound {
		switch status {
		case 429:
			needsCapacity = true
		case 413:
			if m := t.Claims.MaxBody; m != nil && *m >= int64(plan[i].BodyLen) {
				return fmt.Sprintf("the case expects a %d-byte body to be refused; the target claims max_body %d", plan[i].BodyLen, *m)
			}
		}
	}
	if needsCapacity && (t.Claims.Capacity == nil || *t.Claims.Capacity != capacity) {
		return fmt.Sprintf("the case needs a capacity of %d keys; the target claims %s", capacity, claimed(t.Claims.Capacity))
	}
	for _, p := range plan {
		if _, err := t.Place(p.Fault); err != nil {
			return strings.TrimPrefix(err.Error(), target.ErrNotPlaceable.Error()+": ")
		}
	}
	return ""
}

// needsProcessControl reports whether c runs replicas, restarts or stops a
// process, or sends a crash fault (the proxy's, the sink's or the
// target's own: each ends a process the case then starts again).
func needsProcessControl(c casefile.Case) bool {
	if c.Replicas > 1 || slices.ContainsFunc(c.Steps, func(s casefile.Step) bool { return s.Restart != nil || s.Stop != nil }) {
		return true
	}
	return slices.ContainsFunc(c.Plan(), func(p casefile.PlannedCall) bool {
		return slices.ContainsFunc(strings.Split(p.Fault, ","), func(f string) bool { return strings.HasPrefix(f, "crash-") })
	})
}

// claimed is a claim in a reason: its value, or "none".
func claimed[T int | int64](v *T) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}

// SinkReadsKeys reports whether the sink, playing c's ledger, reads a
// forwarded key: where the ledger is given it, and without a ledger unless
// c's keys expire (docs/targets.md, "The downstream cases").
func SinkReadsKeys(c casefile.Case) bool {
	if c.Ledger != nil {
		return c.Ledger.ForwardKey
	}
	return c.Server.KeyTTLMS == 0
}

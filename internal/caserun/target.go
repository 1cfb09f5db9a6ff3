package caserun

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/client"
	"idemlab/internal/proxy"
	"idemlab/internal/results"
	"idemlab/internal/serverproc"
	"idemlab/internal/sideservice"
	"idemlab/internal/sink"
	"idemlab/internal/target"
)

// This file runs a case on a target, a service the lab did not write:
// every replica is the target's own process, started from target.json in a
// process group of its own, with the lab's fault proxy in front of it and
// the lab's effect sink behind it (docs/targets.md). The steps are the
// same as on the lab's own server; the effects applied are the sink's
// journal, or what the target's count command prints once every process
// exited.

// TargetConfig says how to run cases on one target.
type TargetConfig struct {
	Target        *target.Target
	StateRoot     string        // parent of each run's fresh folder
	EffectServer  string        // the lab's own server binary, for {effectserver}
	Databases     Databases     // the postgres service's database per run; nil where there is none
	ClientTimeout time.Duration // how long a client waits for a reply
}

// TargetDetail is what varies between runs of a case on a target: the
// processes, calls and log lines (as a store run's), the sink's journal
// and the proxy's exchanges.
type TargetDetail struct {
	Detail
	Journal   []sink.Entry
	Exchanges []proxy.Exchange
}

// countWithin bounds a target's count command.
const countWithin = 30 * time.Second

// RunTarget runs case c on cfg.Target. An error means the lab could not
// run it (the target never got ready, a side service did not start, the
// count command failed); anything the target does wrong is an
// observation. Every process, the proxies, the sink and the side services
// are stopped on every path.
func RunTarget(ctx context.Context, cfg TargetConfig, c casefile.Case) (results.Run, TargetDetail, error) {
	obs, det, err := runTarget(ctx, cfg, c)
	if err != nil {
		return obs, det, fmt.Errorf("case %s on target %s: %w", c.Name, cfg.Target.Name, err)
	}
	return obs, det, nil
}

func runTarget(ctx context.Context, cfg TargetConfig, c casefile.Case) (results.Run, TargetDetail, error) {
	began := time.Now()
	t := cfg.Target
	obs := results.Run{Case: c.Name, ExitCodes: []int{}, Calls: []results.Call{}}
	var det TargetDetail
	root, err := os.MkdirTemp(cfg.StateRoot, c.Name+"-"+t.Name+"-")
	if err != nil {
		return obs, det, fmt.Errorf("make state folder: %w", err)
	}
	defer os.RemoveAll(root)
	state := filepath.Join(root, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		return obs, det, fmt.Errorf("make state folder: %w", err)
	}

	tr := &targetReplicas{cfg: cfg, t: t, procs: make([]*serverproc.Server, c.Replicas), proxies: make([]*proxy.Proxy, c.Replicas),
		vars: target.Vars{State: state, EffectServer: cfg.EffectServer}}
	defer tr.kill()
	if err := tr.startServices(ctx, root); err != nil {
		return obs, det, err
	}
	if t.Effects.Sink {
		s, err := sink.Start(sink.Config{Replicas: c.Replicas, Kill: tr.killReplica})
		if err != nil {
			return obs, det, fmt.Errorf("start the effect sink: %w", err)
		}
		tr.sink = s
	}

	r := &run{reps: tr, obs: &obs, det: &det.Detail, client: client.New(cfg.ClientTimeout), c: c,
		shape:   &client.Shape{Method: t.Request.Method, KeyHeader: t.Request.KeyHeader, ContentType: t.Request.ContentType},
		observe: observer(t)}
	tr.run = r
	if err := r.execute(ctx); err != nil {
		return obs, det, err
	}
	if err := ctx.Err(); err != nil {
		return obs, det, fmt.Errorf("interrupted: %w", err)
	}
	det.Exchanges = tr.exchanges()
	if tr.sink != nil {
		tr.sink.Close()
		det.Journal = tr.sink.Journal()
		obs.Counter = int64(len(det.Journal))
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
func observer(t *target.Target) func(client.Reply, *results.Call) {
	return func(rep client.Reply, o *results.Call) {
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

// targetReplicas are a target's processes, each behind its own proxy,
// all calling one sink, with the run's side services.
type targetReplicas struct {
	run  *run
	cfg  TargetConfig
	t    *target.Target
	vars target.Vars // the run's; start fills in the replica's own
	sink *sink.Sink  // nil for a target that counts its own effects

	mu      sync.Mutex
	procs   []*serverproc.Server // per replica; nil while stopped
	proxies []*proxy.Proxy       // per replica, kept across restarts
	ex      []proxy.Exchange

	redis  *sideservice.Redis
	dropDB func()
}

func (tr *targetReplicas) count() int { return len(tr.procs) }

func (tr *targetReplicas) running(i int) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.procs[i] != nil
}

func (tr *targetReplicas) url(i int) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.procs[i] == nil {
		return ""
	}
	return "http://" + tr.proxies[i].Addr() + tr.t.Request.Path
}

// startServices starts the side services target.json names.
func (tr *targetReplicas) startServices(ctx context.Context, root string) error {
	for _, s := range tr.t.Services {
		switch s {
		case target.Redis:
			r, err := sideservice.StartRedis(ctx, root)
			if err != nil {
				return err
			}
			tr.redis, tr.vars.RedisURL = r, r.URL
		case target.Postgres:
			if tr.cfg.Databases == nil {
				return errors.New("the postgres service: no PostgreSQL at hand")
			}
			b := make([]byte, 8)
			rand.Read(b)
			name := "run_" + hex.EncodeToString(b)
			dsn, err := tr.cfg.Databases.CreateDatabase(ctx, name)
			if err != nil {
				return fmt.Errorf("the postgres service: %w", err)
			}
			tr.vars.PostgresDSN = dsn
			tr.dropDB = func() {
				dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				tr.cfg.Databases.DropDatabase(dctx, name)
			}
		default:
			return fmt.Errorf("unknown side service %q", s)
		}
	}
	return nil
}

// start starts replica i's process and points its proxy at it.
func (tr *targetReplicas) start(ctx context.Context, i int) error {
	if tr.running(i) {
		return fmt.Errorf("start replica %d: already running", i)
	}
	v := tr.vars
	v.Replica = i
	if tr.sink != nil {
		v.EffectURL = tr.sink.URL(i)
	}
	addr := ""
	if tr.t.Start.ReadyLine == nil || tr.t.Start.ReadyLine.NumSubexp() == 0 {
		port, err := freePort()
		if err != nil {
			return fmt.Errorf("start replica %d: %w", i, err)
		}
		v.Port = port
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	argv, env := tr.t.Command(v)
	path := argv[0]
	if strings.Contains(path, "/") && !filepath.IsAbs(path) {
		path = filepath.Join(tr.t.Dir, path)
	}
	s, err := serverproc.StartSpec(ctx, serverproc.Spec{Path: path, Args: argv[1:], Dir: tr.t.Dir, Env: env,
		ReadyLine: tr.t.Start.ReadyLine, Addr: addr, ReadyHTTP: tr.t.Start.ReadyHTTP, ReadyWithin: tr.t.Start.ReadyWithin, Group: true})
	if err != nil {
		return fmt.Errorf("start target %s replica %d: %w", tr.t.Name, i, err)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.procs[i] = s
	if p := tr.proxies[i]; p != nil {
		p.SetUpstream(s.Addr)
		return nil
	}
	p, err := proxy.Start(proxy.Config{Upstream: s.Addr, Route: tr.route(i), Kill: func() { tr.killReplica(i) }, Observe: tr.observe})
	if err != nil {
		return fmt.Errorf("start the fault proxy of replica %d: %w", i, err)
	}
	tr.proxies[i] = p
	return nil
}

// route places a call's lab fault for replica i's proxy.
func (tr *targetReplicas) route(i int) func(fault string) (proxy.Route, error) {
	return func(fault string) (proxy.Route, error) {
		p, err := tr.t.Place(fault)
		if err != nil {
			return proxy.Route{}, err
		}
		rt := proxy.Route{Header: p.Header, DropReply: p.DropReply, HoldAndKill: p.HoldAndKill}
		if p.Sink != nil {
			if tr.sink == nil {
				return proxy.Route{}, fmt.Errorf("fault %q acts at the sink, and the target has none", fault)
			}
			a := sinkAction(*p.Sink)
			if err := a.Validate(); err != nil {
				return proxy.Route{}, fmt.Errorf("fault %q: %w", fault, err)
			}
			rt.Arm = func(body []byte) func() { return tr.sink.Arm(i, bytes.Clone(body), a) }
		}
		return rt, nil
	}
}

// sinkAction is a placed fault's action in the sink's terms.
func sinkAction(a target.SinkAction) sink.Action {
	end := sink.Answer
	switch a.End {
	case target.Fail:
		end = sink.Fail
	case target.Kill:
		end = sink.Kill
	}
	return sink.Action{Before: a.Before, Apply: a.Apply, After: a.After, End: end}
}

func (tr *targetReplicas) observe(x proxy.Exchange) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.ex = append(tr.ex, x)
}

func (tr *targetReplicas) exchanges() []proxy.Exchange {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]proxy.Exchange(nil), tr.ex...)
}

// killReplica kills replica i's process group with SIGKILL and returns once
// it exited: the crash the proxy and the sink inject. The replica counts as
// running until the case's next stop step collects its exit.
func (tr *targetReplicas) killReplica(i int) {
	tr.mu.Lock()
	s := tr.procs[i]
	tr.mu.Unlock()
	if s != nil {
		s.Kill()
	}
}

// stop ends replica i the way the case says: wait for the exit a crash
// fault caused, or SIGTERM with the target's grace before SIGKILL.
func (tr *targetReplicas) stop(i int, how casefile.Stop) (int, []string, ServerDetail, error) {
	tr.mu.Lock()
	s := tr.procs[i]
	tr.procs[i] = nil
	tr.mu.Unlock()
	var code int
	var err error
	switch how {
	case casefile.StopAwaitExit:
		code, err = s.AwaitExit(tr.t.Start.StopGrace + time.Second)
	default:
		code, err = s.Stop(tr.t.Start.StopGrace)
	}
	return code, s.Log(), ServerDetail{Replica: i, PID: s.PID, Addr: s.Addr, ReadyIn: s.ReadyIn, ExitCode: code}, err
}

// kill is the last resort on every path out of a run: every process, every
// proxy, the sink, the side services.
func (tr *targetReplicas) kill() {
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
	if tr.redis != nil {
		tr.redis.Stop()
	}
	if tr.dropDB != nil {
		tr.dropDB()
		tr.dropDB = nil
	}
}

// countEffects runs the target's count command once every process exited and
// reads the one integer it prints: the effects applied.
func (tr *targetReplicas) countEffects(ctx context.Context) (int64, error) {
	argv := tr.t.CountCommand(tr.vars)
	ctx, cancel := context.WithTimeout(ctx, countWithin)
	defer cancel()
	path := argv[0]
	if strings.Contains(path, "/") && !filepath.IsAbs(path) {
		path = filepath.Join(tr.t.Dir, path)
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Dir = tr.t.Dir
	_, cmd.Env = tr.t.Command(tr.vars)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("count effects (%s): %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("count effects (%s): printed %q, want one integer", strings.Join(argv, " "), bytes.TrimSpace(out))
	}
	return n, nil
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the target binds it; the target then fails to start and
// says so.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

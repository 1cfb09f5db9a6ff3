package chaos

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/client"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store"
	"idemlab/internal/target"
)

// A backend runs one kind of replica.
type backend interface {
	// start starts replica r at old's URL ("" before its first start), or
	// at any port if fresh.
	start(ctx context.Context, r int, old string, fresh bool) (pid int, addr, url string, err error)
	exited(r int) bool
	kill(r int)              // SIGKILL, returning once exited
	collect(r int) int       // the exit code of an exited process
	stop(r int) (int, error) // SIGTERM, then SIGKILL
	// crashCode reports whether code is a crash fault's own exit (the
	// lab's server exits 23; a target is killed, not exited).
	crashCode(code int) bool
	journal(ctx context.Context) ([]Place, error) // once every process exited
	// sinkFired is, by attempt tag ("INTENT.ATTEMPT"), whether the fault
	// the proxy armed at the effect sink for the attempt fired; nil where
	// the lab places no fault at a sink (its own server).
	sinkFired() (map[string]bool, error)
	closeAll() // the last resort on every path
}

// storeBackend runs effectserver replicas on one store.
var _ backend = (*storeBackend)(nil)

type storeBackend struct {
	cfg    Config
	places []store.Place // per replica

	mu      sync.Mutex
	servers []*serverproc.Server // per replica; nil while down
}

// setUpStore lays out the replicas' state as caserun does; release drops
// the database, if it made one.
func (r *run) setUpStore(ctx context.Context, root string) (release func(), err error) {
	cfg := r.cfg
	release = func() {}
	places := make([]store.Place, cfg.Replicas)
	switch {
	case cfg.Store.InDatabase():
		b := make([]byte, 8)
		if _, err := crand.Read(b); err != nil {
			return release, fmt.Errorf("name a database: %w", err)
		}
		name := "chaos_" + hex.EncodeToString(b)
		dsn, err := cfg.Databases.CreateDatabase(ctx, name)
		if err != nil {
			return release, fmt.Errorf("create database: %w", err)
		}
		release = func() {
			// A fresh context: the run's may be cancelled, the database must go.
			dctx, cancel := context.WithTimeout(context.Background(), cfg.StopWithin)
			defer cancel()
			_ = cfg.Databases.DropDatabase(dctx, name)
		}
		for i := range places {
			places[i] = store.Place{Dir: root, DSN: dsn}
		}
	case cfg.Store.Shared():
		for i := range places {
			places[i] = store.Place{Dir: root}
		}
	default:
		for i := range places {
			places[i] = store.Place{Dir: filepath.Join(root, "r"+strconv.Itoa(i))}
			if err := os.Mkdir(places[i].Dir, 0o755); err != nil {
				return release, fmt.Errorf("make state folder: %w", err)
			}
		}
	}
	r.cl.be = &storeBackend{cfg: cfg, places: places, servers: make([]*serverproc.Server, len(places))}
	return release, nil
}

func (b *storeBackend) start(ctx context.Context, r int, old string, fresh bool) (int, string, string, error) {
	addr := protocol.DefaultAddr
	if !fresh {
		addr = strings.TrimSuffix(strings.TrimPrefix(old, "http://"), protocol.EffectPath)
	}
	where := []string{"-state", b.places[r].Dir}
	if b.cfg.Store.InDatabase() {
		where = []string{"-dsn", b.places[r].DSN}
	}
	args := append([]string{"-addr", addr, "-store", string(b.cfg.Store)}, where...)
	args = append(args, "-capacity", strconv.Itoa(b.cfg.MaxIntents), "-wait", b.cfg.ServerWait.String(), "-faults")
	s, err := serverproc.Start(ctx, b.cfg.ServerPath, args, b.cfg.ReadyWithin)
	if err != nil {
		return 0, addr, "", err
	}
	b.mu.Lock()
	b.servers[r] = s
	b.mu.Unlock()
	return s.PID, s.Addr, client.EffectURL(s.Addr), nil
}

// server returns replica r's server; take also forgets it.
func (b *storeBackend) server(r int, take bool) *serverproc.Server {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.servers[r]
	if take {
		b.servers[r] = nil
	}
	return s
}

func (b *storeBackend) exited(r int) bool {
	s := b.server(r, false)
	return s != nil && s.Exited()
}

func (b *storeBackend) kill(r int) {
	if s := b.server(r, false); s != nil {
		s.Kill()
	}
}

func (b *storeBackend) collect(r int) int {
	s := b.server(r, true)
	if s == nil {
		return 0
	}
	code, _ := s.AwaitExit(b.cfg.StopWithin)
	return code
}

func (b *storeBackend) stop(r int) (int, error) {
	s := b.server(r, true)
	if s == nil {
		return 0, nil
	}
	return s.Stop(b.cfg.StopWithin)
}

func (b *storeBackend) crashCode(code int) bool { return code == protocol.CrashExitCode }

func (b *storeBackend) sinkFired() (map[string]bool, error) { return nil, nil }

// journal reads the journal at every distinct place.
func (b *storeBackend) journal(ctx context.Context) ([]Place, error) {
	var out []Place
	index := map[store.Place]int{}
	for r, p := range b.places {
		if i, ok := index[p]; ok {
			out[i].Replicas = append(out[i].Replicas, r)
			continue
		}
		st, err := serverproc.ReadState(ctx, b.cfg.ServerPath, b.cfg.Store, p)
		if err != nil {
			return nil, err
		}
		index[p] = len(out)
		pl := Place{Place: len(out), Replicas: []int{r}, Counter: st.Counter, Effects: make([]Effect, len(st.Effects))}
		for i, e := range st.Effects {
			pl.Effects[i] = Effect{Value: e.Value, BodySHA256: e.BodySHA256}
		}
		out = append(out, pl)
	}
	return out, nil
}

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

// targetBackend runs a target's replicas, each behind its proxy.
var _ backend = (*targetBackend)(nil)

type targetBackend struct {
	tr       *caserun.TargetReplicas
	replicas int
	began    time.Time
	sink     bool // the journal is the sink's, not the one the target's command prints
}

// setUpTarget starts the target's replicas and makes the client speak its
// request shape; release closes the replicas.
func (r *run) setUpTarget(ctx context.Context, root string) (release func(), err error) {
	cfg, t, n := r.cfg, r.cfg.Target, r.sched.Replicas
	tcfg := caserun.TargetConfig{Target: t, StateRoot: root, EffectServer: cfg.ServerPath, Databases: cfg.Databases, ClientTimeout: cfg.AttemptTimeout,
		Capacity: cfg.MaxIntents} // as the stores' servers get it
	tr, err := caserun.StartTargetReplicas(ctx, tcfg, root, n, r.cl.faultKill)
	release = func() {}
	if tr != nil {
		release = tr.Close // even a failed start may have left replicas to close
	}
	if err != nil {
		return release, err
	}
	r.cl.be = &targetBackend{tr: tr, replicas: n, began: r.began, sink: t.Effects.Sink}
	r.shape = &client.Shape{Method: t.Request.Method, KeyHeader: t.Request.KeyHeader, ContentType: t.Request.ContentType}
	r.replay = targetReplay(t)
	r.sendKey = t.Request.KeyFormat.Key
	return release, nil
}

// targetReplay reads a target's replay marker as the case runner does.
func targetReplay(t *target.Target) func(client.Reply) *bool {
	return func(rep client.Reply) *bool {
		if t.Replay == nil {
			return nil
		}
		vs := rep.Header.Values(t.Replay.Header)
		if len(vs) == 0 {
			return nil
		}
		marked := vs[0] == t.Replay.Value
		return &marked
	}
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

func (b *targetBackend) crashCode(int) bool { return false }

func (b *targetBackend) sinkFired() (map[string]bool, error) {
	if !b.sink {
		return nil, nil
	}
	if err := b.tr.Settle(); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, x := range b.tr.Exchanges() {
		if x.SinkArmed && x.Tag != "" {
			out[x.Tag] = out[x.Tag] || x.SinkFired
		}
	}
	return out, nil
}
func (b *targetBackend) closeAll() { b.tr.Close() }

// journal is the history's one place, every replica's: the sink's journal
// (with key, replica and time) or the one the target's command printed.
func (b *targetBackend) journal(ctx context.Context) ([]Place, error) {
	p := Place{Place: 0, Replicas: make([]int, b.replicas), Effects: []Effect{}}
	for i := range p.Replicas {
		p.Replicas[i] = i
	}
	if !b.sink {
		st, err := b.tr.ReadJournal(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range st.Effects {
			p.Effects = append(p.Effects, Effect{Value: e.Value, BodySHA256: e.BodySHA256})
		}
		p.Counter = st.Counter
		return []Place{p}, nil
	}
	for _, e := range b.tr.Journal() {
		rep, at, called := e.Replica, e.Applied.Sub(b.began).Microseconds(), e.Received.Sub(b.began).Microseconds()
		var key *string
		if e.Key != nil {
			k := safeText(*e.Key, maxValue)
			key = &k
		}
		p.Effects = append(p.Effects, Effect{Value: e.Seq, BodySHA256: e.BodySHA256, Key: key, Replica: &rep, AtUS: &at, CalledUS: &called})
	}
	p.Counter = int64(len(p.Effects))
	return []Place{p}, nil
}

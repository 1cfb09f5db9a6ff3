package chaos

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"idemlab/internal/caserun"
	"idemlab/internal/client"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store"
)

// Config says what to run. Zero fields take the defaults documented on
// each field (see Defaults); Run refuses values outside their range.
type Config struct {
	ServerPath string            // the effectserver binary (required)
	Store      protocol.Store    // the store (required)
	StateRoot  string            // an existing folder; the run's state goes in a fresh folder inside it, removed at the end (required)
	Databases  caserun.Databases // makes the postgres store's database (required for postgres only)
	Seed       uint64            // the root of every fault, replica and kill decision

	Replicas int           // servers on one store, 1..4 (default 2)
	Clients  int           // client workers, each one intent at a time, 1..64 (default 8)
	Duration time.Duration // the chaos phase, up to 10 min (default 3s)

	MaxAttempts    int           // chaos-phase attempts per intent, 1..100 (default 8)
	IntentWithin   time.Duration // chaos-phase deadline per intent, from its first attempt (default 3s)
	AttemptTimeout time.Duration // the client's timeout per attempt, connection to reply (default 250ms)
	QuietWithin    time.Duration // bound on the quiet phase; an intent unresolved by then is stuck (default 15s)
	QuietAttempts  int           // quiet-phase attempts per intent, 1..1000 (default 40)
	KillEvery      time.Duration // mean time between the nemesis's kills (default 500ms; negative: no kills)
	ServerWait     time.Duration // the servers' -wait: a duplicate's wait for an in-flight owner (default 150ms)
	MaxIntents     int           // intents at most; also the servers' -capacity (default 50000)
	MaxHistory     int           // chaos-phase attempts at most (default 300000)
	ReadyWithin    time.Duration // a server's start to READY (default 10s)
	StopWithin     time.Duration // a server's exit after SIGTERM (default 15s)
}

// Defaults are the values zero fields of a Config take.
var Defaults = Config{
	Replicas: 2, Clients: 8, Duration: 3 * time.Second,
	MaxAttempts: 8, IntentWithin: 3 * time.Second, AttemptTimeout: 250 * time.Millisecond,
	QuietWithin: 15 * time.Second, QuietAttempts: 40, KillEvery: 500 * time.Millisecond,
	ServerWait: 150 * time.Millisecond, MaxIntents: 50000, MaxHistory: 300000,
	ReadyWithin: 10 * time.Second, StopWithin: 15 * time.Second,
}

func withDefaults(c Config) Config {
	d := Defaults
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.Replicas, d.Replicas)
	setInt(&c.Clients, d.Clients)
	setDur(&c.Duration, d.Duration)
	setInt(&c.MaxAttempts, d.MaxAttempts)
	setDur(&c.IntentWithin, d.IntentWithin)
	setDur(&c.AttemptTimeout, d.AttemptTimeout)
	setDur(&c.QuietWithin, d.QuietWithin)
	setInt(&c.QuietAttempts, d.QuietAttempts)
	setDur(&c.KillEvery, d.KillEvery)
	setDur(&c.ServerWait, d.ServerWait)
	setInt(&c.MaxIntents, d.MaxIntents)
	setInt(&c.MaxHistory, d.MaxHistory)
	setDur(&c.ReadyWithin, d.ReadyWithin)
	setDur(&c.StopWithin, d.StopWithin)
	return c
}

// check refuses what Run cannot run, before anything starts.
func (c Config) check() error {
	if c.ServerPath == "" {
		return errors.New("no server binary given")
	}
	if _, err := protocol.ParseStore(string(c.Store)); err != nil {
		return err
	}
	if fi, err := os.Stat(c.StateRoot); err != nil || !fi.IsDir() {
		return fmt.Errorf("state root %q is not a folder", c.StateRoot)
	}
	if c.Store.InDatabase() && c.Databases == nil {
		return fmt.Errorf("no database server for the %s store", c.Store)
	}
	return c.CheckKnobs()
}

// Bounds on the knobs the runner exposes (-replicas, -clients, -duration).
const (
	MaxReplicas = 4
	MaxClients  = 64
	MaxDuration = 10 * time.Minute
)

// CheckKnobs refuses counts and durations out of their ranges (a zero
// takes its default first), naming each, so that a caller can refuse
// them before anything starts.
func (c Config) CheckKnobs() error {
	c = withDefaults(c)
	rangeErr := func(name string, v, lo, hi int64) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s %d outside %d..%d", name, v, lo, hi)
		}
		return nil
	}
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	return errors.Join(
		rangeErr("replicas", int64(c.Replicas), 1, MaxReplicas),
		rangeErr("clients", int64(c.Clients), 1, MaxClients),
		rangeErr("duration (ms)", ms(c.Duration), 1, ms(MaxDuration)),
		rangeErr("max attempts", int64(c.MaxAttempts), 1, 100),
		rangeErr("intent deadline (ms)", ms(c.IntentWithin), 1, ms(10*time.Minute)),
		rangeErr("attempt timeout (ms)", ms(c.AttemptTimeout), 1, ms(time.Minute)),
		rangeErr("quiet bound (ms)", ms(c.QuietWithin), 1, ms(10*time.Minute)),
		rangeErr("quiet attempts", int64(c.QuietAttempts), 1, 1000),
		rangeErr("kill interval (ms)", max(ms(c.KillEvery), 1), 1, ms(10*time.Minute)),
		rangeErr("server wait (ms)", ms(c.ServerWait), 1, ms(time.Minute)),
		rangeErr("max intents", int64(c.MaxIntents), 1, 1000000),
		rangeErr("max history", int64(c.MaxHistory), 1, 10000000),
	)
}

// intent is one intent's state while the run goes on. Only the client
// working on it touches it.
type intent struct {
	n        int
	key      string
	body     []byte
	sha      string
	attempts int  // made so far, both phases
	resolved bool // got a 200
}

func newIntent(seed uint64, n int) *intent {
	body := fmt.Appendf(nil, "chaos seed %d intent %d", seed, n)
	sum := sha256.Sum256(body)
	return &intent{n: n, key: "chaos-" + strconv.Itoa(n), body: body, sha: hex.EncodeToString(sum[:])}
}

// run is one run's moving parts.
type run struct {
	cfg    Config
	sched  Schedule
	began  time.Time
	cl     *cluster
	client *client.Client

	mu       sync.Mutex
	attempts []Attempt
	intents  []*intent

	nextIntent  atomic.Int64
	reserved    atomic.Int64 // chaos-phase attempts begun
	cappedInt   atomic.Bool
	cappedHist  atomic.Bool
	quietActive atomic.Bool
}

func (r *run) since() int64 { return time.Since(r.began).Microseconds() }

// Run runs one chaos experiment on cfg.Store: it starts cfg.Replicas
// servers on one store, drives them with cfg.Clients clients for
// cfg.Duration while the schedule injects faults and the nemesis kills and
// restarts servers, retries every unresolved intent in a quiet phase,
// stops every server, reads the journal, and checks the history.
//
// An error means the lab itself broke or ctx ended (a server that never
// became ready, a state folder or database that could not be made, a
// journal that could not be read); what the servers did wrong is in the
// Result's verdict, not an error. Every server Run started has exited when
// it returns, on every path.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = withDefaults(cfg)
	if err := cfg.check(); err != nil {
		return Result{}, fmt.Errorf("chaos: %w", err)
	}
	res, err := runChaos(ctx, cfg)
	if err != nil {
		return res, fmt.Errorf("chaos on %s: %w", cfg.Store, err)
	}
	return res, nil
}

func runChaos(ctx context.Context, cfg Config) (Result, error) {
	began := time.Now()
	root, err := os.MkdirTemp(cfg.StateRoot, "chaos-"+string(cfg.Store)+"-")
	if err != nil {
		return Result{}, fmt.Errorf("make state folder: %w", err)
	}
	defer os.RemoveAll(root)
	places, drop, err := makePlaces(ctx, cfg, root)
	if err != nil {
		return Result{}, err
	}
	defer drop()

	r := &run{cfg: cfg, sched: Schedule{Seed: cfg.Seed, Replicas: cfg.Replicas}, began: began,
		client: client.New(cfg.AttemptTimeout)}
	defer r.client.Close()
	r.cl = newCluster(cfg, began, places)
	defer r.cl.killAll()
	for i := range places {
		if err := r.cl.start(ctx, i); err != nil {
			return Result{}, err
		}
	}

	// The chaos phase.
	chaosStart := time.Now()
	chaosOver := make(chan struct{})
	superDone := make(chan struct{})
	superStop := make(chan struct{})
	superErr := make(chan error, 1)
	go func() {
		defer close(superDone)
		superErr <- r.supervise(ctx, chaosStart, chaosOver, superStop)
	}()
	stopSupervisor := func() error {
		select {
		case <-superStop:
		default:
			close(superStop)
		}
		<-superDone
		return <-superErr
	}
	var workers sync.WaitGroup
	for range cfg.Clients {
		workers.Go(func() { r.chaosClient(ctx, chaosOver) })
	}
	timer := time.NewTimer(cfg.Duration)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	close(chaosOver)
	workers.Wait()
	chaosWall := time.Since(chaosStart)
	if ctx.Err() != nil {
		stopSupervisor()
		return Result{}, ctx.Err()
	}

	// The quiet phase: kills stop, every replica is brought up, the
	// unresolved intents are retried without faults.
	r.quietActive.Store(true)
	if err := r.awaitAllUp(ctx); err != nil {
		stopSupervisor()
		return Result{}, err
	}
	quietStart := time.Now()
	var unresolved []*intent
	for _, in := range r.intents {
		if !in.resolved {
			unresolved = append(unresolved, in)
		}
	}
	r.quiet(ctx, unresolved, quietStart.Add(cfg.QuietWithin))
	quietWall := time.Since(quietStart)
	if err := stopSupervisor(); err != nil {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	r.cl.stopAll()

	// The ground truth, once every server has exited.
	h := History{Store: cfg.Store, Seed: cfg.Seed, Replicas: cfg.Replicas}
	h.Places, err = readPlaces(ctx, cfg.ServerPath, cfg.Store, places)
	if err != nil {
		return Result{}, err
	}
	h.Attempts = r.attempts
	slices.SortStableFunc(h.Attempts, func(a, b Attempt) int {
		if c := cmpInt64(a.StartUS, b.StartUS); c != 0 {
			return c
		}
		if a.Intent != b.Intent {
			return a.Intent - b.Intent
		}
		return a.Attempt - b.Attempt
	})
	h.Servers = r.cl.events
	slices.SortStableFunc(h.Servers, func(a, b ServerEvent) int { return cmpInt64(a.AtUS, b.AtUS) })
	return newResult(cfg, h, len(unresolved), chaosWall, quietWall, r.cappedInt.Load(), r.cappedHist.Load()), nil
}

// makePlaces makes where each replica keeps its state, as caserun does: one
// state folder shared by every replica of the durable store, a folder per
// replica for the volatile store, one fresh database for postgres. drop
// removes the database, if any.
func makePlaces(ctx context.Context, cfg Config, root string) (places []store.Place, drop func(), err error) {
	drop = func() {}
	places = make([]store.Place, cfg.Replicas)
	switch {
	case cfg.Store.InDatabase():
		b := make([]byte, 8)
		if _, err := crand.Read(b); err != nil {
			return nil, drop, fmt.Errorf("name a database: %w", err)
		}
		name := "chaos_" + hex.EncodeToString(b)
		dsn, err := cfg.Databases.CreateDatabase(ctx, name)
		if err != nil {
			return nil, drop, fmt.Errorf("create database: %w", err)
		}
		drop = func() {
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
				return nil, drop, fmt.Errorf("make state folder: %w", err)
			}
		}
	}
	return places, drop, nil
}

// readPlaces reads the journal at every distinct place.
func readPlaces(ctx context.Context, server string, kind protocol.Store, places []store.Place) ([]Place, error) {
	var out []Place
	index := map[store.Place]int{}
	for r, p := range places {
		if i, ok := index[p]; ok {
			out[i].Replicas = append(out[i].Replicas, r)
			continue
		}
		st, err := serverproc.ReadState(ctx, server, kind, p)
		if err != nil {
			return nil, err
		}
		index[p] = len(out)
		out = append(out, Place{Place: len(out), Replicas: []int{r}, Counter: st.Counter, Effects: st.Effects})
	}
	return out, nil
}

// supervise is the nemesis and the supervisor: until stop, it restarts
// replicas that exited (a crash fault) or were killed, and during the
// chaos phase it kills replicas as the schedule says, never the last one
// running when there are several. It returns an error only if ctx ended.
func (r *run) supervise(ctx context.Context, chaosStart time.Time, chaosOver, stop <-chan struct{}) error {
	kills := []Kill{}
	if r.cfg.KillEvery > 0 {
		kills = r.sched.Kills(r.cfg.Duration, r.cfg.KillEvery)
	}
	restartAt := make([]time.Time, r.cfg.Replicas) // zero: nothing pending
	tick := time.NewTicker(superviseTick)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		for _, rep := range r.cl.reap() {
			restartAt[rep] = now.Add(crashRestartAfter)
		}
		chaos := !r.quietActive.Load()
		select {
		case <-chaosOver:
			chaos = false
		default:
		}
		for chaos && len(kills) > 0 && now.Sub(chaosStart) >= kills[0].At {
			k := kills[0]
			kills = kills[1:]
			up := r.cl.up()
			running := 0
			for _, u := range up {
				if u {
					running++
				}
			}
			if !up[k.Replica] || running == 1 && r.cfg.Replicas > 1 {
				continue // skipped: down already, or the last one up
			}
			if r.cl.kill(k.Replica) {
				restartAt[k.Replica] = time.Now().Add(k.Down)
			}
		}
		up := r.cl.up()
		for rep, u := range up {
			// A replica down with nothing pending: a crash fault won
			// the race against a kill (kill marks it down, reap never
			// sees it). Restart it as a crashed one.
			if !u && restartAt[rep].IsZero() {
				restartAt[rep] = time.Now().Add(crashRestartAfter)
			}
		}
		for rep, at := range restartAt {
			if up[rep] || at.IsZero() || (chaos && time.Now().Before(at)) {
				continue
			}
			if err := r.cl.start(ctx, rep); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				restartAt[rep] = time.Now().Add(100 * time.Millisecond) // try again later; recorded
				continue
			}
			restartAt[rep] = time.Time{}
		}
	}
}

// Supervisor timing.
const (
	superviseTick     = 5 * time.Millisecond
	crashRestartAfter = 10 * time.Millisecond
)

// awaitAllUp waits until the supervisor has every replica running, within
// a bound.
func (r *run) awaitAllUp(ctx context.Context) error {
	deadline := time.Now().Add(2*r.cfg.ReadyWithin + time.Second)
	for {
		up := r.cl.up()
		all := true
		for _, u := range up {
			all = all && u
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replicas up %v after the chaos phase; the supervisor could not restart the rest: %s", up, r.cl.lastFailure())
		}
		t := time.NewTimer(superviseTick)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// chaosClient takes new intents until the chaos phase ends or a cap is
// reached, and makes each one's attempts as the schedule says.
func (r *run) chaosClient(ctx context.Context, over <-chan struct{}) {
	for {
		select {
		case <-over:
			return
		default:
		}
		n := int(r.nextIntent.Add(1) - 1)
		if n >= r.cfg.MaxIntents {
			r.cappedInt.Store(true)
			return
		}
		in := newIntent(r.cfg.Seed, n)
		r.mu.Lock()
		r.intents = append(r.intents, in)
		r.mu.Unlock()
		deadline := time.Now().Add(r.cfg.IntentWithin)
		for in.attempts < r.cfg.MaxAttempts && !in.resolved && time.Now().Before(deadline) {
			d := r.sched.Attempt(in.n, in.attempts)
			if d.Backoff > 0 && !sleep(ctx, over, d.Backoff) {
				break
			}
			if r.reserved.Add(1) > int64(r.cfg.MaxHistory) {
				r.cappedHist.Store(true)
				return
			}
			r.attempt(ctx, in, PhaseChaos, d)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// quiet retries the unresolved intents, each until a 200, QuietAttempts
// attempts or the deadline, with cfg.Clients workers.
func (r *run) quiet(ctx context.Context, intents []*intent, deadline time.Time) {
	var next atomic.Int64
	never := make(chan struct{})
	var wg sync.WaitGroup
	for range r.cfg.Clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(intents) {
					return
				}
				in := intents[i]
				for k := 0; k < r.cfg.QuietAttempts && !in.resolved && time.Now().Before(deadline) && ctx.Err() == nil; k++ {
					d := r.sched.Quiet(in.n, in.attempts)
					if k > 0 && !sleep(ctx, never, d.Backoff) {
						return
					}
					r.attempt(ctx, in, PhaseQuiet, d)
				}
			}
		})
	}
	wg.Wait()
}

// sleep waits d; false if ctx ended or stop closed first.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}

// maxValue bounds the reply body kept in the history.
const maxValue = 64

// attempt makes one attempt of in and records it.
func (r *run) attempt(ctx context.Context, in *intent, phase Phase, d Decision) {
	a := Attempt{Kind: "attempt", Intent: in.n, Key: in.key, BodySHA256: in.sha, Replica: d.Replica,
		Attempt: in.attempts, Phase: phase, Fault: d.Fault}
	in.attempts++
	key := in.key
	url := client.EffectURL(r.cl.addr(d.Replica))
	a.StartUS = r.since()
	rep, err := r.client.Post(ctx, url, client.Request{Key: &key, Fault: d.Fault, Body: in.body})
	a.EndUS = r.since()
	switch {
	case err != nil:
		a.Outcome = client.Classify(err)
		a.Type = Info
		if a.Outcome == protocol.OutcomeRefused {
			a.Type = Fail
		}
		a.Error = short(err.Error())
	default:
		a.Outcome = protocol.OutcomeReply
		a.Status = rep.Status
		a.Value = string(rep.Body[:min(len(rep.Body), maxValue)])
		a.Replayed = rep.Replayed
		a.Type = Fail
		if rep.Status == http.StatusOK {
			a.Type = OK
			in.resolved = true
		}
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
}

package chaos

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/caserun"
	"idemlab/internal/client"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store"
	"idemlab/internal/target"
)

// Config says what to run. Zero fields take the defaults documented on
// each field (see Defaults); Run refuses values outside their range.
type Config struct {
	ServerPath string         // the effectserver binary (required for a store; a target's {effectserver})
	Store      protocol.Store // the store (required unless Target is set)
	// Target, instead of Store, runs the experiment on a target
	// (docs/targets.md): its replicas between the lab's fault proxy and its
	// effect sink (caserun.TargetReplicas), the sink's journal the ground
	// truth. It must count its effects at the sink.
	Target    *target.Target
	StateRoot string            // an existing folder; the run's state goes in a fresh folder inside it, removed at the end (required)
	Databases caserun.Databases // makes the postgres store's database, or a target's postgres service's (required there only)
	Seed      uint64            // the root of every fault, replica and kill decision

	// Replicas are the servers on one store, 1..4 (default 2); on a target
	// that claims no shared store one replica runs whatever this says
	// (Result.ReplicasNote says so).
	Replicas int
	Clients  int           // client workers, each one intent at a time, 1..64 (default 8)
	Duration time.Duration // the chaos phase, up to 10 min (default 3s)

	// Faults, when not nil, narrows the fault kinds the schedule places to
	// these (each one the store or the target can take): a test's way to
	// run without crashes, say. Nil places every kind it can take.
	Faults []string

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
	// The history records the schedule's times in ms: the run keeps to
	// what it records.
	c.Duration = c.Duration.Truncate(time.Millisecond)
	c.KillEvery = c.KillEvery.Truncate(time.Millisecond)
	return c
}

// check refuses what Run cannot run, before anything starts.
func (c Config) check() error {
	if fi, err := os.Stat(c.StateRoot); err != nil || !fi.IsDir() {
		return fmt.Errorf("state root %q is not a folder", c.StateRoot)
	}
	if c.Target != nil {
		if c.Store != "" {
			return fmt.Errorf("store %s and target %s: a run is on one or the other", c.Store, c.Target.Name)
		}
		if why := NotRunnable(c.Target); why != "" {
			return fmt.Errorf("%w: target %s: %s", ErrNotRunnable, c.Target.Name, why)
		}
		if _, err := c.faults(); err != nil {
			return err
		}
		return c.CheckKnobs()
	}
	if c.ServerPath == "" {
		return errors.New("no server binary given")
	}
	if _, err := protocol.ParseStore(string(c.Store)); err != nil {
		return err
	}
	if c.Store.InDatabase() && c.Databases == nil {
		return fmt.Errorf("no database server for the %s store", c.Store)
	}
	if _, err := c.faults(); err != nil {
		return err
	}
	return c.CheckKnobs()
}

// ErrNotRunnable means the chaos experiment cannot run on a target; the
// error says why (NotRunnable).
var ErrNotRunnable = errors.New("chaos cannot run")

// NotRunnable says why the chaos experiment cannot run on t, or "" when it
// can: the journal it is judged by is the sink's, so a target that counts
// its effects with a command (a number, after the run) gives it nothing
// to judge an intent by.
func NotRunnable(t *target.Target) string {
	if !t.Effects.Sink && len(t.Effects.Journal) == 0 {
		return "it counts its effects with a command, not at the effect sink, and names no journal command: the checker judges each intent by the journal of applied effects (which intent's body, how often), and a count after the run names no intent"
	}
	return ""
}

// name is the store's or the target's name.
func (c Config) name() string {
	if c.Target != nil {
		return c.Target.Name
	}
	return string(c.Store)
}

// claims are what the store or the target promises.
func (c Config) claims() Claims {
	if c.Target != nil {
		return Claims{Durable: c.Target.Claims.Durable, SharedStore: c.Target.Claims.SharedStore}
	}
	return StoreClaims(c.Store)
}

// replicas is how many replicas run: on a target that claims no shared
// store one (each replica would keep its own keys, and a retry on another
// replica is a new request to it), else as asked.
func (c Config) replicas() int {
	if c.Target != nil && !c.Target.Claims.SharedStore {
		return 1
	}
	return c.Replicas
}

// ReplicasNote says why fewer replicas run than asked, or "".
func (c Config) ReplicasNote() string {
	c = withDefaults(c)
	if n := c.replicas(); n != c.Replicas {
		return fmt.Sprintf("%d replica, not %d: target %s claims no shared store, so its replicas would not share keys", n, c.Replicas, c.Target.Name)
	}
	return ""
}

// faults are the fault kinds the run's schedule places, in FaultKinds
// order, and an error naming a kind of c.Faults that cannot be placed.
func (c Config) faults() ([]string, error) {
	can := chaosplan.StoreFaults
	var why map[string]string
	if c.Target != nil {
		can, why = TargetFaults(c.Target)
	}
	if c.Faults == nil {
		return slices.Clone(can), nil
	}
	out := []string{}
	for _, k := range chaosplan.FaultKinds {
		if slices.Contains(c.Faults, k) {
			out = append(out, k)
		}
	}
	for _, k := range c.Faults {
		switch {
		case !slices.Contains(chaosplan.FaultKinds, k):
			return nil, fmt.Errorf("fault kind %q: unknown (known: %s)", k, strings.Join(chaosplan.FaultKinds, ", "))
		case !slices.Contains(can, k) && why[k] != "":
			return nil, fmt.Errorf("fault kind %s: %s", k, why[k])
		case !slices.Contains(can, k):
			return nil, fmt.Errorf("fault kind %s: the lab's server does not take it", k)
		}
	}
	return out, nil
}

// TargetFaults returns the fault kinds (of FaultKinds, in its order) that
// t can take, and for each other kind why not: a kind is scheduled only
// where target.Place places it. A target that passes every lab fault to
// its own header ("*") takes the lab server's kinds only, which are the
// ones such a server speaks.
func TargetFaults(t *target.Target) (kinds []string, why map[string]string) {
	why = map[string]string{}
	_, passThrough := t.Native[target.AllFaults]
	for _, k := range chaosplan.FaultKinds {
		if passThrough && !slices.Contains(chaosplan.StoreFaults, k) {
			why[k] = "the target passes every lab fault to its own header, and " + k + " is not one the lab's server takes"
			continue
		}
		v := k
		if chaosplan.TakesArg(k) {
			v += "=1ms"
		}
		if _, err := t.Place(v); err != nil {
			why[k] = err.Error()
			continue
		}
		kinds = append(kinds, k)
	}
	return kinds, why
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

	quietTries int       // quiet-phase attempts made
	lastQuiet  time.Time // when the last one ended
}

func newIntent(seed uint64, n int) *intent {
	body := []byte(chaosplan.Body(seed, int64(n)))
	sum := sha256.Sum256(body)
	return &intent{n: n, key: chaosplan.Key(int64(n)), body: body, sha: hex.EncodeToString(sum[:])}
}

// run is one run's moving parts.
type run struct {
	cfg    Config
	sched  chaosplan.Schedule
	began  time.Time
	cl     *cluster
	client *client.Client
	shape  *client.Shape            // a target's request shape; nil for the lab's server
	replay func(client.Reply) *bool // reads the replay marker of a reply

	// The phases' marks, set by runPhases before the history reads them.
	chaosStart, quietStart time.Time
	chaosWall, quietWall   time.Duration

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

// Run runs one chaos experiment on cfg.Store (or cfg.Target): it starts
// the replicas, drives them with cfg.Clients clients for cfg.Duration
// while the schedule injects faults and the nemesis kills and restarts
// replicas, retries every unresolved intent in a quiet phase, stops every
// replica, reads the journal, and checks the history.
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
		return res, fmt.Errorf("chaos on %s: %w", cfg.name(), err)
	}
	return res, nil
}

// runChaos is Run once cfg is checked: it sets up the replicas, runs the
// two phases and assembles the history. Every deferred release runs on
// every path, in the reverse of the order the parts were made.
func runChaos(ctx context.Context, cfg Config) (Result, error) {
	began := time.Now()
	root, err := os.MkdirTemp(cfg.StateRoot, "chaos-"+cfg.name()+"-")
	if err != nil {
		return Result{}, fmt.Errorf("make state folder: %w", err)
	}
	defer os.RemoveAll(root)
	r := newRun(cfg, began)
	defer r.client.Close()
	journal, release, err := r.setUpBackend(ctx, root)
	defer release()
	if err != nil {
		return Result{}, err
	}
	defer r.cl.be.closeAll()
	if err := r.startReplicas(ctx); err != nil {
		return Result{}, err
	}
	if err := r.runPhases(ctx); err != nil {
		return Result{}, err
	}
	h, err := r.history(journal)
	if err != nil {
		return Result{}, err
	}
	return newResult(cfg, h, r.chaosWall, r.quietWall, r.cappedInt.Load(), r.cappedHist.Load()), nil
}

// newRun makes a run's state for cfg: its schedule, its client (reading
// the lab server's replay marker until a target says otherwise) and a
// cluster whose backend setUpBackend fills in.
func newRun(cfg Config, began time.Time) *run {
	n := cfg.replicas()
	faults, _ := cfg.faults() // checked
	r := &run{cfg: cfg, sched: chaosplan.Schedule{Seed: cfg.Seed, Replicas: n, Faults: faults}, began: began,
		client: client.New(cfg.AttemptTimeout), replay: func(rep client.Reply) *bool { return rep.Replayed }}
	r.cl = newCluster(nil, began, n)
	return r
}

// setUpBackend sets up what the replicas run on, a target or a store. It
// returns how to read the ground truth once every process has exited, and
// a release to defer on every path, error or not.
func (r *run) setUpBackend(ctx context.Context, root string) (journal func() ([]Place, error), release func(), err error) {
	if r.cfg.Target != nil {
		return r.setUpTarget(ctx, root)
	}
	return r.setUpStore(ctx, root)
}

// setUpTarget starts the target's replicas between the lab's fault proxy
// and its effect sink, and makes the client speak the target's request
// shape and read its replay marker. release closes the replicas.
func (r *run) setUpTarget(ctx context.Context, root string) (journal func() ([]Place, error), release func(), err error) {
	cfg, t, n := r.cfg, r.cfg.Target, r.sched.Replicas
	tcfg := caserun.TargetConfig{Target: t, StateRoot: root, EffectServer: cfg.ServerPath, Databases: cfg.Databases, ClientTimeout: cfg.AttemptTimeout,
		Capacity: cfg.MaxIntents} // as the stores' servers get it
	tr, err := caserun.StartTargetReplicas(ctx, tcfg, root, n, r.cl.faultKill)
	release = func() {}
	if tr != nil {
		// Even a failed start may have left replicas to close.
		release = tr.Close
	}
	if err != nil {
		return nil, release, err
	}
	r.cl.be = &targetBackend{tr}
	r.shape = &client.Shape{Method: t.Request.Method, KeyHeader: t.Request.KeyHeader, ContentType: t.Request.ContentType}
	r.replay = targetReplay(t)
	journal = func() ([]Place, error) { return sinkPlaces(tr, n, r.began), nil }
	if !t.Effects.Sink {
		journal = func() ([]Place, error) { return journalPlaces(ctx, tr, n) }
	}
	return journal, release, nil
}

// setUpStore makes the store's places for the lab's own servers. release
// drops the store's database, if it made one.
func (r *run) setUpStore(ctx context.Context, root string) (journal func() ([]Place, error), release func(), err error) {
	cfg := r.cfg
	places, drop, err := makePlaces(ctx, cfg, root)
	if err != nil {
		return nil, func() {}, err
	}
	r.cl.be = newStoreBackend(cfg, places)
	journal = func() ([]Place, error) { return readPlaces(ctx, cfg.ServerPath, cfg.Store, places) }
	return journal, drop, nil
}

// startReplicas starts every replica, in order, before any client runs.
func (r *run) startReplicas(ctx context.Context) error {
	for i := range r.sched.Replicas {
		if err := r.cl.start(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// runPhases runs the chaos phase and then the quiet phase under one
// supervisor, stops it, and stops every replica. It returns an error if
// ctx ended or the replicas could not all be brought back; the supervisor
// has returned on every path.
func (r *run) runPhases(ctx context.Context) error {
	r.chaosStart = time.Now()
	chaosOver := make(chan struct{})
	sup := r.startSupervisor(ctx, chaosOver)
	r.chaosPhase(ctx, chaosOver)
	if ctx.Err() != nil {
		sup.stop()
		return ctx.Err()
	}
	if err := r.quietPhase(ctx); err != nil {
		sup.stop()
		return err
	}
	if err := sup.stop(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.cl.stopAll()
	return nil
}

// supervisor is the supervise goroutine the phases run under.
type supervisor struct {
	halt chan struct{} // closed to end supervise
	done chan struct{} // closed once supervise has returned
	err  chan error    // supervise's error
}

// startSupervisor starts supervise for a chaos phase that began at
// r.chaosStart and ends when chaosOver closes.
func (r *run) startSupervisor(ctx context.Context, chaosOver <-chan struct{}) *supervisor {
	s := &supervisor{halt: make(chan struct{}), done: make(chan struct{}), err: make(chan error, 1)}
	chaosStart := r.chaosStart
	go func() {
		defer close(s.done)
		s.err <- r.supervise(ctx, chaosStart, chaosOver, s.halt)
	}()
	return s
}

// stop ends supervise, waits for it to return, and returns its error.
func (s *supervisor) stop() error {
	select {
	case <-s.halt:
	default:
		close(s.halt)
	}
	<-s.done
	return <-s.err
}

// chaosPhase runs cfg.Clients chaos clients until cfg.Duration has passed
// or ctx ends, then waits for them and records how long the phase took.
func (r *run) chaosPhase(ctx context.Context, chaosOver chan struct{}) {
	var workers sync.WaitGroup
	for c := range r.cfg.Clients {
		workers.Go(func() { r.chaosClient(ctx, c, chaosOver) })
	}
	timer := time.NewTimer(r.cfg.Duration)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	close(chaosOver)
	workers.Wait()
	r.chaosWall = time.Since(r.chaosStart)
}

// quietPhase stops the kills, waits until every replica is up, and
// retries the unresolved intents without faults, within cfg.QuietWithin.
func (r *run) quietPhase(ctx context.Context) error {
	r.quietActive.Store(true)
	if err := r.awaitAllUp(ctx); err != nil {
		return err
	}
	r.quietStart = time.Now()
	r.quiet(ctx, r.unresolved(), r.quietStart.Add(r.cfg.QuietWithin))
	r.quietWall = time.Since(r.quietStart)
	return nil
}

// unresolved are the intents the chaos phase left without a 200, in the
// order they were taken. The chaos clients have all returned.
func (r *run) unresolved() []*intent {
	var out []*intent
	for _, in := range r.intents {
		if !in.resolved {
			out = append(out, in)
		}
	}
	return out
}

// history is the run's record once every process has exited: its
// settings and phase marks, the ground truth that journal reads, and the
// attempts and server events in time order.
func (r *run) history(journal func() ([]Place, error)) (History, error) {
	cfg := r.cfg
	h := History{Store: cfg.Store, Claims: cfg.claims(), Seed: cfg.Seed, Replicas: r.sched.Replicas, Clients: cfg.Clients,
		DurationMS: cfg.Duration.Milliseconds(), KillEveryMS: cfg.KillEvery.Milliseconds(), Faults: r.sched.Faults,
		ChaosStartUS: r.chaosStart.Sub(r.began).Microseconds(), QuietStartUS: r.quietStart.Sub(r.began).Microseconds()}
	if cfg.Target != nil {
		h.Target = cfg.Target.Name
	}
	places, err := journal()
	if err != nil {
		return History{}, err
	}
	h.Places = places
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
	return h, nil
}

// targetReplay reads a target's replay marker the way the case runner
// does: the header's first value equal to the one target.json names; nil
// when the header is absent or the target names none.
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

// sinkPlaces is the sink's journal as the history's one place, every
// replica's: each effect with its forwarded key, the replica that called
// and when it was applied on the run's clock.
func sinkPlaces(tr *caserun.TargetReplicas, replicas int, began time.Time) []Place {
	p := Place{Place: 0, Replicas: make([]int, replicas), Effects: []Effect{}}
	for i := range p.Replicas {
		p.Replicas[i] = i
	}
	for _, e := range tr.Journal() {
		rep, at := e.Replica, e.Applied.Sub(began).Microseconds()
		var key *string
		if e.Key != nil {
			k := safeText(*e.Key, maxValue)
			key = &k
		}
		p.Effects = append(p.Effects, Effect{Value: e.Seq, BodySHA256: e.BodySHA256, Key: key, Replica: &rep, AtUS: &at})
	}
	p.Counter = int64(len(p.Effects))
	return []Place{p}
}

// journalPlaces is the journal a target's own command printed once every
// process exited, as the history's one place, every replica's (a target
// that counts its effects itself runs several replicas only on a shared
// store): each effect's value and body, with no replica and no time.
func journalPlaces(ctx context.Context, tr *caserun.TargetReplicas, replicas int) ([]Place, error) {
	st, err := tr.ReadJournal(ctx)
	if err != nil {
		return nil, err
	}
	p := Place{Place: 0, Replicas: make([]int, replicas), Counter: st.Counter, Effects: []Effect{}}
	for i := range p.Replicas {
		p.Replicas[i] = i
	}
	for _, e := range st.Effects {
		p.Effects = append(p.Effects, Effect{Value: e.Value, BodySHA256: e.BodySHA256})
	}
	return []Place{p}, nil
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
		out = append(out, Place{Place: len(out), Replicas: []int{r}, Counter: st.Counter, Effects: storeEffects(st.Effects)})
	}
	return out, nil
}

// supervise is the nemesis and the supervisor: until stop, it restarts
// replicas that exited (a crash fault) or were killed, and during the
// chaos phase it kills replicas as the schedule says, never the last one
// running when there are several. Every planned kill is recorded: a kill
// event, or a kill_skipped event saying why it did not land (the planned
// kills the chaos phase did not reach among them). A restart runs in its
// own goroutine, so that a replica slow to start (a target's runtime)
// holds up neither the other replicas nor the plan. It returns, once
// every restart it began has ended, an error only if ctx ended.
func (r *run) supervise(ctx context.Context, chaosStart time.Time, chaosOver, stop <-chan struct{}) error {
	s := r.newSupervision(chaosStart)
	defer s.starts.Wait()
	tick := time.NewTicker(superviseTick)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			s.skipRest()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case res := <-s.started:
			if err := s.restartEnded(ctx, res); err != nil {
				return err
			}
		case <-tick.C:
			s.round(ctx, chaosOver)
		}
	}
}

// supervision is supervise's state: the planned kills and, per replica,
// the restart pending or under way. Only the supervise goroutine touches
// it; a restart reports back on started.
type supervision struct {
	r          *run
	chaosStart time.Time
	kills      []chaosplan.Kill
	next       int         // the next planned kill
	restartAt  []time.Time // zero: nothing pending
	starting   []bool
	started    chan startResult
	starts     sync.WaitGroup
}

// newSupervision plans the run's kills (none when KillEvery is negative)
// with nothing pending yet.
func (r *run) newSupervision(chaosStart time.Time) *supervision {
	kills := []chaosplan.Kill{}
	if r.cfg.KillEvery > 0 {
		kills = r.sched.Kills(r.cfg.Duration, r.cfg.KillEvery)
	}
	return &supervision{r: r, chaosStart: chaosStart, kills: kills,
		restartAt: make([]time.Time, r.sched.Replicas), starting: make([]bool, r.sched.Replicas),
		started: make(chan startResult, r.sched.Replicas)}
}

// skipRest records every planned kill not yet made as skipped: the chaos
// phase ended before it.
func (s *supervision) skipRest() {
	for ; s.next < len(s.kills); s.next++ {
		s.r.cl.skip(s.kills[s.next].Replica, s.next, chaosplan.SkipPhaseEnd)
	}
}

// restartEnded takes in how a restart ended; a failed one is tried again
// later (the cluster recorded the failure), unless ctx ended.
func (s *supervision) restartEnded(ctx context.Context, res startResult) error {
	s.starting[res.replica] = false
	s.restartAt[res.replica] = time.Time{}
	if res.err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.restartAt[res.replica] = time.Now().Add(100 * time.Millisecond)
	}
	return nil
}

// round is one tick: replicas that exited get a restart pending, the
// kills now due are made while the chaos phase lasts (and skipped once it
// is over), and the restarts now due begin.
func (s *supervision) round(ctx context.Context, chaosOver <-chan struct{}) {
	now := time.Now()
	for _, rep := range s.r.cl.reap() {
		s.restartAt[rep] = now.Add(crashRestartAfter)
	}
	chaos := s.inChaos(chaosOver)
	if chaos {
		s.killDue(now)
	} else {
		s.skipRest()
	}
	s.beginRestarts(ctx, chaos)
}

// inChaos reports whether the chaos phase still lasts: the quiet phase
// has not begun and chaosOver is open.
func (s *supervision) inChaos(chaosOver <-chan struct{}) bool {
	if s.r.quietActive.Load() {
		return false
	}
	select {
	case <-chaosOver:
		return false
	default:
		return true
	}
}

// killDue makes every planned kill due by now, in plan order.
func (s *supervision) killDue(now time.Time) {
	for ; s.next < len(s.kills) && now.Sub(s.chaosStart) >= s.kills[s.next].At; s.next++ {
		s.kill(s.kills[s.next], s.next)
	}
}

// kill makes planned kill i (k) and sets its replica's restart, or records
// why it did not land: the replica is down, or it is the last one running
// of several.
func (s *supervision) kill(k chaosplan.Kill, i int) {
	up := s.r.cl.running()
	running := 0
	for _, u := range up {
		if u {
			running++
		}
	}
	switch {
	case !up[k.Replica]:
		s.r.cl.skip(k.Replica, i, chaosplan.SkipDown)
	case running == 1 && s.r.sched.Replicas > 1:
		s.r.cl.skip(k.Replica, i, chaosplan.SkipLastUp)
	case s.r.cl.kill(k.Replica, i) == "":
		s.restartAt[k.Replica] = time.Now().Add(k.Down)
	}
}

// beginRestarts starts, each in its own goroutine, every down replica
// whose restart is due; outside the chaos phase every pending restart is
// due at once.
func (s *supervision) beginRestarts(ctx context.Context, chaos bool) {
	up := s.r.cl.running()
	for rep, u := range up {
		// A replica down with nothing pending: a crash fault won
		// the race against a kill. Restart it as a crashed one.
		if !u && !s.starting[rep] && s.restartAt[rep].IsZero() {
			s.restartAt[rep] = time.Now().Add(crashRestartAfter)
		}
	}
	started, cl := s.started, s.r.cl
	for rep, at := range s.restartAt {
		if up[rep] || s.starting[rep] || at.IsZero() || (chaos && time.Now().Before(at)) {
			continue
		}
		s.starting[rep] = true
		s.starts.Go(func() { started <- startResult{rep, cl.start(ctx, rep)} })
	}
}

// startResult is how a restart the supervisor began ended.
type startResult struct {
	replica int
	err     error
}

// Supervisor timing.
const (
	superviseTick     = 5 * time.Millisecond
	crashRestartAfter = 10 * time.Millisecond
)

// awaitAllUp waits until the supervisor has every replica running, within
// a bound.
func (r *run) awaitAllUp(ctx context.Context) error {
	deadline := time.Now().Add(2*r.readyWithin() + time.Second)
	for {
		up := r.cl.running()
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

// readyWithin bounds one start: the lab's server's, or the target's own.
func (r *run) readyWithin() time.Duration {
	if r.cfg.Target != nil {
		return r.cfg.Target.Start.ReadyWithin
	}
	return r.cfg.ReadyWithin
}

// chaosClient (number c) takes new intents until the chaos phase ends or a
// cap is reached, and makes each one's attempts as the schedule says.
func (r *run) chaosClient(ctx context.Context, c int, over <-chan struct{}) {
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
			r.attempt(ctx, c, in, PhaseChaos, d)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// quiet retries the unresolved intents in turn, each until a 200,
// QuietAttempts attempts or the deadline, with cfg.Clients workers: a
// worker takes the intent at the head of the queue, makes one attempt (at
// least quietBackoff after that intent's last one), and puts it back at
// the tail while it is unresolved. So every unresolved intent is retried
// at once, and an intent that stays stuck (every retry 409) takes no
// worker from the others.
func (r *run) quiet(ctx context.Context, intents []*intent, deadline time.Time) {
	var mu sync.Mutex
	queue := slices.Clone(intents)
	never := make(chan struct{})
	var wg sync.WaitGroup
	for c := range r.cfg.Clients {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				mu.Lock()
				if len(queue) == 0 {
					mu.Unlock()
					return
				}
				in := queue[0]
				queue = queue[1:]
				mu.Unlock()
				d := r.sched.Quiet(in.n, in.attempts)
				if wait := time.Until(in.lastQuiet.Add(d.Backoff)); in.quietTries > 0 && wait > 0 && !sleep(ctx, never, wait) {
					return
				}
				r.attempt(ctx, c, in, PhaseQuiet, d)
				in.quietTries++
				in.lastQuiet = time.Now()
				if !in.resolved && in.quietTries < r.cfg.QuietAttempts {
					mu.Lock()
					queue = append(queue, in)
					mu.Unlock()
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

// maxValue bounds the reply body (and a forwarded key) kept in the history.
const maxValue = 64

// safeText is s cut to at most n bytes at a character boundary, with every
// invalid UTF-8 sequence replaced by "?": a history line is valid UTF-8.
func safeText(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// attempt makes one attempt of in by client c and records it.
func (r *run) attempt(ctx context.Context, c int, in *intent, phase Phase, d chaosplan.Decision) {
	a := Attempt{Kind: "attempt", Intent: in.n, Key: in.key, BodySHA256: in.sha, Client: c, Replica: d.Replica,
		Attempt: in.attempts, Phase: phase, Fault: d.Fault}
	in.attempts++
	key := in.key
	url := r.cl.url(d.Replica)
	a.StartUS = r.since()
	rep, err := r.client.Post(ctx, url, client.Request{Key: &key, Fault: d.Fault, Body: in.body, Shape: r.shape})
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
		a.Value = safeText(string(rep.Body), maxValue)
		a.Replayed = r.replay(rep)
		a.Type = ReplyType(rep.Status)
		in.resolved = a.Type == OK
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
}

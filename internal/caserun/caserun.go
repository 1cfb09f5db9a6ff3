// Package caserun runs one case on one store, or on a target (target.go):
// fresh state, real server processes (one per replica), the case's steps as
// real loopback HTTP calls, stops, starts and crashes, and at the end the
// effects applied, read once every server exited. It returns what was
// observed; the audit judges it.
//
// A case with a ledger gets one more server, started first and stopped
// last, on the durable store with its own state and keys: every replica
// calls it for its effect (effectserver -downstream), and its counter is
// the run's ledger counter.
package caserun

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/client"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store"
)

// Protocol holds the constants every server and client runs with.
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

// Databases makes and drops a database store's databases, one per run.
type Databases interface {
	CreateDatabase(ctx context.Context, name string) (dsn string, err error)
	DropDatabase(ctx context.Context, name string) error
}

// Config says how to run: which server binary, where state goes.
type Config struct {
	ServerPath     string        // the effectserver binary
	StateRoot      string        // parent of each run's fresh state folder
	Protocol       Protocol      // constants
	Databases      Databases     // a database store's databases; nil: none at hand
	UnsafeRegistry protocol.Flaw // a mutation run's broken registry (effectserver -unsafe-registry)
}

// Detail is what varies between runs of the same case: it goes to run.json.
type Detail struct {
	Wall      time.Duration
	Servers   []ServerDetail // in the order they were stopped
	Calls     []CallDetail   // in the order of the observed calls
	ServerLog []string
}

// ServerDetail is one server process of a run, as the evidence records it.
type ServerDetail struct {
	Replica  int    `json:"-"`
	PID      int    `json:"pid"`
	Addr     string `json:"addr"`
	ReadyIn  MS     `json:"ready_ms"`
	ExitCode int    `json:"exit_code"`
}

// CallDetail is the varying part of one call, as the evidence records it.
type CallDetail struct {
	Latency MS     `json:"latency_ms"`
	Error   string `json:"error"`  // the client's raw error text; empty on a reply
	Client  int    `json:"client"` // launch index within its concurrent group
	Replica int    `json:"-"`      // the replica the call went to
}

// MS is a duration the evidence records in milliseconds, to the microsecond.
type MS time.Duration

// MarshalJSON writes d as a number of milliseconds.
func (d MS) MarshalJSON() ([]byte, error) {
	return json.Marshal(float64(time.Duration(d).Microseconds()) / 1000)
}

// Observed is what the lab observed in one run of a case on a store, in
// the exact shape results.json records: only facts that are the same on
// every machine (no times, ports or PIDs).
type Observed struct {
	Case          string         `json:"case"`
	Store         protocol.Store `json:"store"`
	Counter       int64          `json:"counter"`
	ExitCodes     []int          `json:"exit_codes"`
	LedgerCounter *int64         `json:"ledger_counter,omitempty"` // the ledger's, in a case with one
	Calls         []Call         `json:"calls"`
}

// Call is one HTTP call and what came back.
type Call struct {
	Step     int              `json:"step"`
	Key      *string          `json:"key"`
	Fault    *string          `json:"fault"`
	Outcome  protocol.Outcome `json:"outcome"`
	Status   *int             `json:"status"`
	Body     *string          `json:"body"`
	Replayed *bool            `json:"replayed"`
	// RetryAfter is the reply's Retry-After, recorded on a target only (its
	// verdict asks for it on a 409).
	RetryAfter *string `json:"retry_after,omitempty"`
	// Replica is the replica the call went to, left out for replica 0
	// (every call of a one-server case) and for a concurrent group spread
	// across replicas, whose winner differs from run to run.
	Replica int `json:"replica,omitempty"`
}

// Compare orders calls canonically: by outcome, status, body, replayed
// (absent < false < true), so a concurrent group reads the same whatever
// order its replies arrived in.
func Compare(a, b Call) int {
	return cmp.Or(
		cmp.Compare(a.Outcome, b.Outcome),
		cmp.Compare(or(a.Status, -1), or(b.Status, -1)),
		cmp.Compare(or(a.Body, ""), or(b.Body, "")),
		cmp.Compare(replayedRank(a.Replayed), replayedRank(b.Replayed)),
	)
}

// or is *p, or none for nil.
func or[T any](p *T, none T) T {
	if p == nil {
		return none
	}
	return *p
}

// replayedRank orders a replay marker: absent, false, true.
func replayedRank(p *bool) int {
	if p == nil {
		return 0
	}
	if *p {
		return 2
	}
	return 1
}

// SortCanonical sorts a concurrent group in place by Compare, stably, and
// returns the permutation: perm[i] is the original index of the call now at i.
func SortCanonical(calls []Call) (perm []int) {
	perm = make([]int, len(calls))
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(i, j int) int { return Compare(calls[i], calls[j]) })
	sorted := make([]Call, len(calls))
	for i, p := range perm {
		sorted[i] = calls[p]
	}
	copy(calls, sorted)
	return perm
}

// Run runs case c on store. An error means the lab itself broke (a server
// never became ready, a state folder or database could not be made);
// anything the server does wrong is an observation, not an error.
func Run(ctx context.Context, cfg Config, c casefile.Case, kind protocol.Store) (obs Observed, det Detail, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("case %s on %s: %w", c.Name, kind, err)
		}
	}()
	began := time.Now()
	obs = Observed{Case: c.Name, Store: kind, ExitCodes: []int{}, Calls: []Call{}}
	root, err := os.MkdirTemp(cfg.StateRoot, c.Name+"-"+string(kind)+"-")
	if err != nil {
		return obs, det, fmt.Errorf("make state folder: %w", err)
	}
	defer os.RemoveAll(root)
	places, drop, err := placesFor(ctx, cfg, kind, root, c.Replicas)
	if err != nil {
		return obs, det, err
	}
	defer drop()

	sr := &storeReplicas{cfg: cfg, kind: kind, places: places, servers: make([]*serverproc.Server, c.Replicas), c: c}
	r := &run{reps: sr, obs: &obs, det: &det, client: client.New(cfg.Protocol.ClientTimeout), c: c}
	sr.run = r
	defer sr.Close()
	if c.Ledger != nil {
		sr.ledgerDir = filepath.Join(root, "ledger")
		if err := os.Mkdir(sr.ledgerDir, 0o755); err != nil {
			return obs, det, fmt.Errorf("make ledger state folder: %w", err)
		}
		if err := sr.startLedger(ctx); err != nil {
			return obs, det, err
		}
	}
	if err := r.execute(ctx); err != nil {
		return obs, det, err
	}
	if err := sr.stopLedger(); err != nil {
		return obs, det, err
	}
	if err := ctx.Err(); err != nil {
		// Calls cut short by the interruption were recorded as failures
		// the server never caused: the run is not evidence.
		return obs, det, fmt.Errorf("interrupted: %w", err)
	}
	st, err := readState(ctx, cfg.ServerPath, kind, places)
	if err != nil {
		return obs, det, err
	}
	obs.Counter = st.Counter
	if c.Ledger != nil {
		lst, err := serverproc.ReadState(ctx, cfg.ServerPath, protocol.Durable, store.Place{Dir: sr.ledgerDir})
		if err != nil {
			return obs, det, fmt.Errorf("ledger: %w", err)
		}
		obs.LedgerCounter = &lst.Counter
	}
	det.Wall = time.Since(began)
	return obs, det, nil
}

// placesFor makes where each replica keeps its state: one folder the
// durable store's replicas share, a folder per volatile replica (its
// registry is per process, as its column shows), one database for a
// database store, which drop removes.
func placesFor(ctx context.Context, cfg Config, kind protocol.Store, root string, replicas int) (places []store.Place, drop func(), err error) {
	drop, dsn := func() {}, ""
	if kind.InDatabase() {
		if cfg.Databases == nil {
			return nil, drop, fmt.Errorf("no database server for the %s store", kind)
		}
		if dsn, drop, err = newDatabase(ctx, cfg.Databases); err != nil {
			return nil, func() {}, err
		}
	}
	places = make([]store.Place, replicas)
	for i := range places {
		places[i] = store.Place{Dir: root, DSN: dsn}
		if !kind.InDatabase() && !kind.Shared() && replicas > 1 {
			places[i].Dir = filepath.Join(root, "r"+strconv.Itoa(i))
			if err := os.Mkdir(places[i].Dir, 0o755); err != nil {
				return nil, drop, fmt.Errorf("make state folder: %w", err)
			}
		}
	}
	return places, drop, nil
}

// newDatabase makes a database for one run, named at random (nothing of the
// run reaches the evidence), and returns its DSN and how to drop it (with a
// fresh context: the run's may be cancelled, the database must go).
func newDatabase(ctx context.Context, dbs Databases) (dsn string, drop func(), err error) {
	b := make([]byte, 8)
	rand.Read(b)
	name := "run_" + hex.EncodeToString(b)
	if dsn, err = dbs.CreateDatabase(ctx, name); err != nil {
		return "", nil, err
	}
	return dsn, func() {
		dctx, cancel := context.WithTimeout(context.Background(), dropWithin)
		defer cancel()
		dbs.DropDatabase(dctx, name)
	}, nil
}

// dropWithin bounds dropping a run's database.
const dropWithin = 10 * time.Second

// readState reads the effects applied at every distinct place, summed.
func readState(ctx context.Context, server string, kind protocol.Store, places []store.Place) (store.State, error) {
	var total store.State
	seen := map[store.Place]bool{}
	for _, p := range places {
		if seen[p] {
			continue
		}
		seen[p] = true
		st, err := serverproc.ReadState(ctx, server, kind, p)
		if err != nil {
			return store.State{}, err
		}
		total.Counter += st.Counter
		total.Effects = append(total.Effects, st.Effects...)
	}
	return total, nil
}

// replicas are the servers a case's calls go to: the lab's own effect
// server on a store (storeReplicas, below), or a target between the fault
// proxy and the effect sink (target.go).
type replicas interface {
	Count() int
	Start(ctx context.Context, replica int) error
	// Stop ends a running replica the way the case says and returns its
	// exit code, its log lines and what went wrong stopping it.
	Stop(replica int, how casefile.Stop) (code int, log []string, detail ServerDetail, err error)
	Running(replica int) bool
	URL(replica int) string // the replica's call URL; "" while it is down
	Close()                 // the last resort on every path out of a run
}

// run is the state of one case execution.
type run struct {
	reps   replicas
	obs    *Observed
	det    *Detail
	client *client.Client
	c      casefile.Case
	// shape, key and observe are a target's: how a request is sent, how a
	// case's key is written for it (recorded as sent), and what of its
	// reply is recorded beyond the status and the body; nil for the lab's
	// own server.
	shape   *client.Shape
	key     func(string) string
	observe func(client.Reply, *Call)
}

// execute starts every replica, runs the steps, then stops those still up.
func (r *run) execute(ctx context.Context) error {
	for i := range r.reps.Count() {
		if err := r.reps.Start(ctx, i); err != nil {
			return err
		}
	}
	for i, step := range r.c.Steps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted before step %d: %w", i, err)
		}
		var err error
		switch {
		case step.Call != nil:
			r.sequential(ctx, i, *step.Call)
		case step.Concurrent != nil:
			r.concurrent(ctx, i, *step.Concurrent)
		case step.Parallel != nil:
			r.parallel(ctx, i, *step.Parallel)
		case step.Restart != nil:
			r.stopServer(step.Restart.Replica, step.Restart.Stop)
			err = r.reps.Start(ctx, step.Restart.Replica)
		case step.Stop != nil:
			r.stopServer(step.Stop.Replica, step.Stop.How)
		case step.Start != nil:
			err = r.reps.Start(ctx, step.Start.Replica)
		case step.Sleep != nil:
			select {
			case <-time.After(time.Duration(step.Sleep.MS) * time.Millisecond):
			case <-ctx.Done():
			}
		default:
			err = errors.New("empty step") // the schema forbids it
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
	}
	for i := range r.reps.Count() {
		if r.reps.Running(i) {
			r.stopServer(i, casefile.StopSIGTERM)
		}
	}
	return nil
}

// stopServer ends a running replica's server the way the case says and
// records its exit code; one that had to be killed is recorded with 137
// (SIGKILL), an observation the audit will flag, not a broken lab.
func (r *run) stopServer(replica int, how casefile.Stop) {
	if !r.reps.Running(replica) {
		return
	}
	code, log, d, err := r.reps.Stop(replica, how)
	r.obs.ExitCodes = append(r.obs.ExitCodes, code)
	r.det.Servers = append(r.det.Servers, d)
	for _, line := range log {
		r.det.ServerLog = append(r.det.ServerLog, fmt.Sprintf("server %d (replica %d): %s", len(r.det.Servers)-1, replica, line))
	}
	if err != nil {
		r.det.ServerLog = append(r.det.ServerLog, "runner: "+err.Error())
	}
}

// storeReplicas are the lab's servers on one store, and the case's ledger.
type storeReplicas struct {
	run     *run
	cfg     Config
	kind    protocol.Store
	c       casefile.Case
	places  []store.Place        // per replica
	servers []*serverproc.Server // per replica; nil while stopped

	ledgerDir string             // the ledger's state folder; "" without one
	ledger    *serverproc.Server // nil while stopped
}

func (sr *storeReplicas) Count() int         { return len(sr.servers) }
func (sr *storeReplicas) Running(i int) bool { return sr.servers[i] != nil }

// startLedger starts the case's ledger: durable, in its own state folder,
// with faults on (an upstream asks it to drop a reply) and its own key TTL.
func (sr *storeReplicas) startLedger(ctx context.Context) error {
	args := sr.serverArgs(protocol.Durable, store.Place{Dir: sr.ledgerDir}, 0, sr.c.Ledger.KeyTTLMS)
	s, err := serverproc.Start(ctx, sr.cfg.ServerPath, args, sr.cfg.Protocol.ReadyWithin)
	if err != nil {
		return fmt.Errorf("start the ledger: %w", err)
	}
	sr.ledger = s
	return nil
}

// stopLedger stops the ledger after every replica, keeping its log. No
// case crashes the ledger: an exit other than 0 means the lab broke.
func (sr *storeReplicas) stopLedger() error {
	s := sr.ledger
	if s == nil {
		return nil
	}
	sr.ledger = nil
	code, err := s.Stop(sr.cfg.Protocol.StopWithin)
	for _, line := range s.Log() {
		sr.run.det.ServerLog = append(sr.run.det.ServerLog, "ledger: "+line)
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		return fmt.Errorf("stop the ledger: %w", err)
	}
	return nil
}

// serverArgs are the flags of a server of the run on kind at place: the
// protocol's limits (capacity the case's, if set), faults on, and the key
// TTL, if any.
func (sr *storeReplicas) serverArgs(kind protocol.Store, place store.Place, capacity, keyTTLMS int) []string {
	p := sr.cfg.Protocol
	args := []string{"-addr", protocol.DefaultAddr, "-store", string(kind), "-capacity", strconv.Itoa(cmp.Or(capacity, p.Capacity)),
		"-max-body", strconv.Itoa(p.MaxBody), "-wait", p.Wait.String(), "-faults"}
	if kind.InDatabase() {
		args = append(args, "-dsn", place.DSN)
	} else {
		args = append(args, "-state", place.Dir)
	}
	if keyTTLMS > 0 {
		args = append(args, "-key-ttl", (time.Duration(keyTTLMS) * time.Millisecond).String())
	}
	return args
}

// Start starts a replica's server on its place.
func (sr *storeReplicas) Start(ctx context.Context, replica int) error {
	if sr.servers[replica] != nil {
		return fmt.Errorf("start replica %d: already running", replica)
	}
	args := sr.serverArgs(sr.kind, sr.places[replica], sr.c.Server.Capacity, sr.c.Server.KeyTTLMS)
	if sr.ledger != nil {
		args = append(args, "-downstream", client.EffectURL(sr.ledger.Addr), "-forward-key="+strconv.FormatBool(sr.c.Ledger.ForwardKey))
		if ms := sr.c.Server.LeaseMS; ms > 0 {
			args = append(args, "-lease", (time.Duration(ms) * time.Millisecond).String())
		}
	}
	if sr.cfg.UnsafeRegistry != protocol.Sound {
		args = append(args, "-unsafe-registry", string(sr.cfg.UnsafeRegistry))
	}
	s, err := serverproc.Start(ctx, sr.cfg.ServerPath, args, sr.cfg.Protocol.ReadyWithin)
	if err != nil {
		return fmt.Errorf("start effectserver (replica %d): %w", replica, err)
	}
	sr.servers[replica] = s
	return nil
}

// Stop ends a replica's server the way the case says.
func (sr *storeReplicas) Stop(replica int, how casefile.Stop) (int, []string, ServerDetail, error) {
	s := sr.servers[replica]
	sr.servers[replica] = nil
	var code int
	var err error
	switch how {
	case casefile.StopAwaitExit:
		code, err = s.AwaitExit(sr.cfg.Protocol.StopWithin)
	case casefile.StopSIGTERM:
		code, err = s.Stop(sr.cfg.Protocol.StopWithin)
	default: // the schema allows no other; stop it anyway, and say so
		code, err = s.Stop(sr.cfg.Protocol.StopWithin)
		err = errors.Join(fmt.Errorf("unknown stop %q: stopped with SIGTERM", how), err)
	}
	return code, s.Log(), ServerDetail{Replica: replica, PID: s.PID, Addr: s.Addr, ReadyIn: MS(s.ReadyIn), ExitCode: code}, err
}

// Close is the last resort on every path out of Run.
func (sr *storeReplicas) Close() {
	for _, s := range sr.servers {
		if s != nil {
			s.Kill()
		}
	}
	if sr.ledger != nil {
		sr.ledger.Kill()
	}
}

// URL is a replica's effect URL; "" while it is stopped (a call is refused).
func (sr *storeReplicas) URL(replica int) string {
	if s := sr.servers[replica]; s != nil {
		return client.EffectURL(s.Addr)
	}
	return ""
}

// request is repetition i of a case's call.
func (r *run) request(c casefile.Call, i int) client.Request {
	key := c.KeyFor(i)
	if key != nil && r.key != nil {
		k := r.key(*key)
		key = &k
	}
	return client.Request{Key: key, Fault: c.Fault, Body: c.BodyFor(i), Shape: r.shape, ContentType: c.ContentType,
		Timeout: time.Duration(c.TimeoutMS) * time.Millisecond}
}

func (r *run) sequential(ctx context.Context, step int, call casefile.Call) {
	for i := range max(call.Repeat, 1) {
		if ctx.Err() != nil {
			return // interrupted: Run reports it, sends nothing more
		}
		o, d := r.call(ctx, call.Replica, r.request(call, i))
		o.Step = step
		o.Replica = call.Replica
		r.record(o, d)
	}
}

// concurrent releases every client of the group at once and records the
// group in canonical order; the launch index of each goes to run.json.
// Across replicas, client i goes to replica i mod replicas, left out of
// results.json: which replica won a race differs from run to run.
func (r *run) concurrent(ctx context.Context, step int, g casefile.Concurrent) {
	replicaOf := func(client int) int {
		if g.AcrossReplicas {
			return client % r.reps.Count()
		}
		return g.Call.Replica
	}
	for i := range max(g.Call.Repeat, 1) {
		if ctx.Err() != nil {
			return // interrupted: Run reports it, sends nothing more
		}
		req := r.request(g.Call, i)
		obs := make([]Call, g.Clients)
		dets := make([]CallDetail, g.Clients)
		r.together(g.Clients, 0, func(client int) {
			obs[client], dets[client] = r.call(ctx, replicaOf(client), req)
		})
		perm := SortCanonical(obs)
		for j, o := range obs {
			o.Step = step
			if !g.AcrossReplicas {
				o.Replica = g.Call.Replica
			}
			d := dets[perm[j]]
			d.Client = perm[j]
			r.record(o, d)
		}
	}
}

// parallel starts different calls together, the i-th after i staggers, and
// records them in list order.
func (r *run) parallel(ctx context.Context, step int, p casefile.Parallel) {
	obs := make([]Call, len(p.Calls))
	dets := make([]CallDetail, len(p.Calls))
	r.together(len(p.Calls), time.Duration(p.StaggerMS)*time.Millisecond, func(i int) {
		c := p.Calls[i]
		obs[i], dets[i] = r.call(ctx, c.Replica, r.request(c, 0))
		obs[i].Replica = c.Replica
	})
	for i := range obs {
		obs[i].Step = step
		dets[i].Client = i
		r.record(obs[i], dets[i])
	}
}

// together runs f(0..n-1) at once, f(i) after i staggers, and waits for all.
func (r *run) together(n int, stagger time.Duration, f func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			if i > 0 && stagger > 0 {
				time.Sleep(time.Duration(i) * stagger)
			}
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// call makes one call to a replica: what came back, and what varied.
func (r *run) call(ctx context.Context, replica int, req client.Request) (Call, CallDetail) {
	o := Call{Key: req.Key}
	if req.Fault != "" {
		f := req.Fault
		o.Fault = &f
	}
	d := CallDetail{Replica: replica}
	url := r.reps.URL(replica)
	if url == "" {
		o.Outcome = protocol.OutcomeRefused
		d.Error = fmt.Sprintf("replica %d is stopped", replica)
		return o, d
	}
	began := time.Now()
	rep, err := r.client.Post(ctx, url, req)
	d.Latency = MS(time.Since(began))
	if err != nil {
		o.Outcome = client.Classify(err)
		d.Error = err.Error()
		return o, d
	}
	o.Outcome = protocol.OutcomeReply
	o.Status = &rep.Status
	body := KeptBody(rep.Body)
	o.Body = &body
	o.Replayed = rep.Replayed
	if r.observe != nil {
		r.observe(rep, &o)
	}
	return o, d
}

// MaxKeptBody bounds a reply body kept in the evidence: the proxy lets a
// target answer up to 2 MiB, and 2 MiB on every call of every trial would
// make a targets.json past what its audit reads (audit.CapTargets).
const MaxKeptBody = 1024

// KeptBody is a reply body as the evidence keeps it: whole up to
// MaxKeptBody bytes; past it, its first MaxKeptBody bytes, then its length
// and SHA-256, so that two bodies kept are equal exactly when they were
// equal whole (a replay's body against the first reply's).
func KeptBody(b []byte) string {
	if len(b) <= MaxKeptBody {
		return string(b)
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%s [body cut at %d bytes: %d in all, sha256 %s]", b[:MaxKeptBody], MaxKeptBody, len(b), hex.EncodeToString(sum[:]))
}

func (r *run) record(o Call, d CallDetail) {
	r.obs.Calls = append(r.obs.Calls, o)
	r.det.Calls = append(r.det.Calls, d)
}

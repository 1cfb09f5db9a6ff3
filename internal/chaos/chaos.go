package chaos

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/client"
	"idemlab/internal/protocol"
)

// intent is one intent's state, touched only by the client working on it.
type intent struct {
	n        int
	key      string
	body     []byte
	sha      string
	attempts int  // made so far, both phases
	resolved bool // got a 2xx

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
	// sendKey writes an intent's key as the target takes it (its
	// request.key_format: a UUID for "uuid"); the history keeps the
	// plan's key, from which the key sent follows. nil sends it as is.
	sendKey func(string) string

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

// Run runs one chaos experiment on cfg.Store or cfg.Target (see the
// package comment). An error means the lab itself broke or ctx ended.
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

// runChaos is Run once cfg is checked; every release is deferred.
func runChaos(ctx context.Context, cfg Config) (Result, error) {
	began := time.Now()
	root, err := os.MkdirTemp(cfg.StateRoot, "chaos-"+cfg.name()+"-")
	if err != nil {
		return Result{}, fmt.Errorf("make state folder: %w", err)
	}
	defer os.RemoveAll(root)
	faults, _ := cfg.faults() // checked
	n := cfg.replicas()
	r := &run{cfg: cfg, sched: chaosplan.Schedule{Seed: cfg.Seed, Replicas: n, Faults: faults}, began: began,
		client: client.New(cfg.AttemptTimeout), replay: func(rep client.Reply) *bool { return rep.Replayed }}
	defer r.client.Close()
	r.cl = newCluster(nil, began, n)
	setUp := r.setUpStore
	if cfg.Target != nil {
		setUp = r.setUpTarget
	}
	release, err := setUp(ctx, root)
	defer release()
	if err != nil {
		return Result{}, err
	}
	defer r.cl.be.closeAll()
	for i := range n {
		if err := r.cl.start(ctx, i); err != nil {
			return Result{}, err
		}
	}
	if err := r.runPhases(ctx); err != nil {
		return Result{}, err
	}
	h, err := r.history(ctx)
	if err != nil {
		return Result{}, err
	}
	return newResult(cfg, h, r.chaosWall, r.quietWall, r.cappedInt.Load(), r.cappedHist.Load()), nil
}

// runPhases runs the chaos and quiet phases under one supervisor, then
// stops it and every replica.
func (r *run) runPhases(ctx context.Context) error {
	r.chaosStart = time.Now()
	chaosOver, halt, supervised := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() { supervised <- r.supervise(ctx, r.chaosStart, chaosOver, halt) }()
	stop := sync.OnceValue(func() error { close(halt); return <-supervised })
	defer stop()
	r.chaosPhase(ctx, chaosOver)
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.quietPhase(ctx); err != nil {
		return err
	}
	if err := stop(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.cl.stopAll()
	return nil
}

// chaosPhase runs cfg.Clients chaos clients for cfg.Duration.
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
	var unresolved []*intent // the chaos clients have all returned
	for _, in := range r.intents {
		if !in.resolved {
			unresolved = append(unresolved, in)
		}
	}
	r.quietStart = time.Now()
	r.quiet(ctx, unresolved, r.quietStart.Add(r.cfg.QuietWithin))
	r.quietWall = time.Since(r.quietStart)
	return nil
}

// history is the run's record once every process has exited.
func (r *run) history(ctx context.Context) (History, error) {
	cfg := r.cfg
	h := History{Header: Header{Store: cfg.Store, Claims: cfg.claims(), Seed: cfg.Seed, Replicas: r.sched.Replicas, Clients: cfg.Clients,
		DurationMS: cfg.Duration.Milliseconds(), KillEveryMS: cfg.KillEvery.Milliseconds(), Faults: r.sched.Faults,
		ChaosStartUS: r.chaosStart.Sub(r.began).Microseconds(), QuietStartUS: r.quietStart.Sub(r.began).Microseconds()}}
	if cfg.Target != nil {
		h.Target = cfg.Target.Name
	}
	places, err := r.cl.be.journal(ctx)
	if err != nil {
		return History{}, err
	}
	h.Places = places
	fired, err := r.cl.be.sinkFired()
	if err != nil {
		return History{}, err
	}
	h.Attempts = r.attempts
	for i, a := range h.Attempts {
		if f, ok := fired[attemptTag(a.Intent, a.Attempt)]; ok {
			h.Attempts[i].SinkFired = &f
		}
	}
	slices.SortStableFunc(h.Attempts, func(a, b Attempt) int {
		return cmp.Or(cmp.Compare(a.StartUS, b.StartUS), cmp.Compare(a.Intent, b.Intent), cmp.Compare(a.Attempt, b.Attempt))
	})
	h.Servers = r.cl.events
	slices.SortStableFunc(h.Servers, func(a, b ServerEvent) int { return cmp.Compare(a.AtUS, b.AtUS) })
	return h, nil
}

// chaosClient c takes new intents until the chaos phase ends or a cap is
// reached, attempting each as the schedule says.
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

// quiet retries the unresolved intents round-robin, each until a 2xx,
// QuietAttempts or the deadline: a worker makes one attempt and puts the
// intent back at the tail, so a stuck intent (every retry 409) takes no
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

// attempt makes and records one attempt of in by client c.
func (r *run) attempt(ctx context.Context, c int, in *intent, phase Phase, d chaosplan.Decision) {
	a := Attempt{Intent: in.n, Key: in.key, BodySHA256: in.sha, Client: c, Replica: d.Replica,
		Attempt: in.attempts, Phase: phase, Fault: d.Fault}
	in.attempts++
	key := in.key
	if r.sendKey != nil {
		key = r.sendKey(key)
	}
	url := r.cl.url(d.Replica)
	a.StartUS = r.since()
	req := client.Request{Key: &key, Fault: d.Fault, Body: in.body, Shape: r.shape}
	if r.cfg.Target != nil {
		req.Tag = attemptTag(a.Intent, a.Attempt)
	}
	rep, err := r.client.Post(ctx, url, req)
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
		a.Type = replyType(rep.Status)
		in.resolved = a.Type == OK
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
}

// attemptTag names an attempt to the fault proxy (protocol.AttemptHeader).
func attemptTag(intent, attempt int) string { return fmt.Sprintf("%d.%d", intent, attempt) }

// maxValue bounds the reply body (and a forwarded key) kept in the history.
const maxValue = 64

// safeText is s cut to n bytes as valid UTF-8 (invalid sequences "?").
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

// short cuts an error text to a bounded length for the history.
func short(s string) string {
	const n = 160
	if t := safeText(s, n); t != s {
		return t + "…"
	}
	return s
}

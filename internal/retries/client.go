package retries

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"idemlab/internal/client"
	"idemlab/internal/protocol"
)

// decisions is one intent's random stream: a PCG seeded with (seed, row,
// intent), read in a fixed order per attempt (drop, delay, backoff), so
// what an intent does never depends on which worker runs it or when.
type decisions struct {
	src *rand.PCG
}

func newDecisions(seed uint64, stream, intent int) decisions {
	return decisions{rand.NewPCG(seed, uint64(stream)<<32|uint64(intent))}
}

// drop reports whether this attempt is dropped before sending.
func (d decisions) drop(percent int) bool { return d.src.Uint64()%100 < uint64(percent) }

// delayMS is the server-side delay of this attempt, uniform in 0..max.
func (d decisions) delayMS(max int) int { return int(d.src.Uint64() % uint64(max+1)) }

// backoff is the full-jitter wait before attempt n+1, n attempts made:
// r·min(cap, base·2^n) ms with r uniform in [0, 1).
func (d decisions) backoff(n, baseMS, capMS int) time.Duration {
	r := float64(d.src.Uint64()>>11) / (1 << 53)
	ceil := float64(capMS)
	if n < 31 {
		ceil = min(ceil, float64(baseMS)*float64(int64(1)<<n))
	}
	return time.Duration(r * ceil * float64(time.Millisecond))
}

// tally is what a client counted of its own attempts.
type tally struct {
	sent    int // attempts sent (not dropped before sending)
	refused int // replies with a 4xx or 5xx status
}

func (t *tally) add(o tally) { t.sent += o.sent; t.refused += o.refused }

// rowClient is one row's client: its design, its connections and where it
// keeps its keys across a restart.
type rowClient struct {
	p      Parameters
	seed   uint64
	r      Row
	stream int
	url    string
	keys   string // a folder for keys written to a file (restart-key-in-file)
	hc     *client.Client
}

// drive sends every intent of one row to url with p.Workers workers and
// returns what the client counted; an error means the harness broke (or
// ctx ended): failed attempts are the experiment.
func drive(ctx context.Context, p Parameters, seed uint64, r Row, stream int, url, keys string) (tally, error) {
	// The lab's client: no keep-alives, so Go's transport adds no retries
	// the client design did not make (see client.Client).
	c := &rowClient{p: p, seed: seed, r: r, stream: stream, url: url, keys: keys,
		hc: client.New(time.Duration(p.ClientTimeoutMS) * time.Millisecond)}
	defer c.hc.Close()
	next := make(chan int)
	errs := make([]error, p.Workers)
	tallies := make([]tally, p.Workers)
	var wg sync.WaitGroup
	for w := range p.Workers {
		wg.Go(func() {
			for i := range next {
				t, err := c.intent(ctx, i)
				tallies[w].add(t)
				if err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		})
	}
	for i := range p.Intents {
		next <- i
	}
	close(next)
	wg.Wait()
	var sum tally
	for w := range p.Workers {
		sum.add(tallies[w])
		if errs[w] != nil {
			return sum, errs[w]
		}
	}
	return sum, ctx.Err()
}

// retryable reports whether a failed attempt is worth another: a network
// error or timeout (or a drop before sending), 429 or a 5xx; any other 4xx
// refuses the request as it stands.
func retryable(status int, err error) bool {
	return err != nil || status == http.StatusTooManyRequests || status >= 500
}

// intent makes intent i's attempts as its row's client design does, until
// one gets 200, the design stops, or the total deadline passes.
func (c *rowClient) intent(ctx context.Context, i int) (tally, error) {
	ictx := ctx
	if c.p.TotalDeadlineMS > 0 {
		var cancel context.CancelFunc
		ictx, cancel = context.WithTimeout(ctx, time.Duration(c.p.TotalDeadlineMS)*time.Millisecond)
		defer cancel()
	}
	in := &intentRun{c: c, ctx: ictx, d: newDecisions(c.seed, c.stream, i), i: i, body: body(c.stream, i)}
	switch c.r.Client {
	case RetryThreeLayers, RetryOneLayer:
		in.layered()
		return in.t, ctx.Err()
	}
	err := in.retry(ctx)
	return in.t, err
}

// intentRun is one intent's state while its client makes its attempts.
type intentRun struct {
	c          *rowClient
	ctx        context.Context // the intent's: ends at the total deadline, if any
	d          decisions
	i          int
	body       []byte
	key        *string       // the key the next attempt sends; nil: none
	retryAfter time.Duration // the last reply's Retry-After
	t          tally
}

// layered runs a layered design: one key per user action, made at the
// top, sent by every try of every layer.
func (in *intentRun) layered() {
	layers := 1
	if in.c.r.Client == RetryThreeLayers {
		layers = in.c.p.Layers
	}
	k := key(in.c.stream, in.i) // once per user action, at the top
	in.key = &k
	in.layer(layers)
}

// retry runs a single-loop design: up to its attempts, each after a
// backoff with the key the design sends then, until one gets 200 or the
// design stops; the error is a key file's, or ctx's.
func (in *intentRun) retry(ctx context.Context) error {
	c := in.c
	k, err := in.firstKey()
	if err != nil {
		return err
	}
	in.key = k
	attempts := c.p.MaxAttempts
	if c.r.Client == NeverRetry {
		attempts = 1
	}
	anyFailure := c.r.Client == RetryNoKey || c.r.Client == RetrySameKey || c.r.Client == Retry4xx
	for n := range attempts {
		if n > 0 && !sleep(in.ctx, in.backoff(n)) {
			break // the total deadline passed (or the run ended)
		}
		if err := in.rekey(n); err != nil {
			return err
		}
		dropped := in.d.drop(c.p.DropPercent)
		delay := in.d.delayMS(c.p.MaxServerDelayMS)
		if dropped {
			continue // never sent: a failed attempt, like a network error
		}
		status, err := in.send(delay)
		if err == nil && status == http.StatusOK {
			return nil
		}
		if in.ctx.Err() != nil {
			break // the run ended, or the total deadline passed
		}
		if !anyFailure && !retryable(status, err) {
			break
		}
	}
	return ctx.Err()
}

// firstKey is the key the design makes before the first send: one per
// intent, one shared by two intents (the client's bug), or one saved to its
// file first; nil for none, or one made inside the loop (rekey).
func (in *intentRun) firstKey() (*string, error) {
	c, i := in.c, in.i
	switch c.r.Client {
	case RetrySameKey, IgnoreRetryAfter, HonourRetryAfter, RestartKeyInMemory:
		ik := key(c.stream, i) // once per intent, before the first send
		return &ik, nil
	case Retry4xx, RetryRetryable:
		j := i
		if i%c.p.CollideEvery == c.p.CollideEvery-1 {
			j = i - 1 // the client's bug: two intents, one key
		}
		ik := key(c.stream, j)
		return &ik, nil
	case RestartKeyInFile:
		ik := key(c.stream, i)
		if err := c.saveKey(i, ik); err != nil { // written before the first send
			return nil, err
		}
		return &ik, nil
	}
	return nil, nil
}

// backoff is the wait before attempt n: the design's jittered backoff,
// and for a client that honours it at least the last Retry-After.
func (in *intentRun) backoff(n int) time.Duration {
	wait := in.d.backoff(n, in.c.p.BackoffBaseMS, in.c.p.BackoffCapMS)
	if in.c.r.Client == HonourRetryAfter {
		wait = max(wait, in.retryAfter)
	}
	return wait
}

// rekey changes the key before attempt n where the design does: every
// attempt, or after the restart that follows the first failed one.
func (in *intentRun) rekey(n int) error {
	c := in.c
	switch {
	case c.r.Client == RetryNewKey:
		ik := attemptKey(c.stream, in.i, n) // the bug: a key made inside the loop
		in.key = &ik
	case n == 1 && c.r.Client == RestartKeyInMemory:
		// The client restarted after the first failed attempt: the
		// key it kept in memory is gone, and it makes another.
		ik := attemptKey(c.stream, in.i, n)
		in.key = &ik
	case n == 1 && c.r.Client == RestartKeyInFile:
		ik, err := c.loadKey(in.i) // restarted: the key comes back from its file
		if err != nil {
			return err
		}
		in.key = &ik
	}
	return nil
}

// send sends one attempt with a server-side delay of delayMS, counts it
// and its reply, and keeps the reply's Retry-After for the next backoff.
func (in *intentRun) send(delayMS int) (status int, err error) {
	in.t.sent++
	fault := fmt.Sprintf("%s=%dms", protocol.FaultDelay, delayMS)
	rep, err := in.c.hc.Post(in.ctx, in.c.url, client.Request{Key: in.key, Fault: fault, Body: in.body})
	in.retryAfter = rep.RetryAfter
	if err == nil && rep.Status >= 400 {
		in.t.refused++
	}
	return rep.Status, err
}

// layer is one retry layer of a layered client: up to LayerAttempts tries of
// the layer below (the wire, below the last); it reports whether one got 200.
func (in *intentRun) layer(depth int) bool {
	p := in.c.p
	for a := range p.LayerAttempts {
		if a > 0 && !sleep(in.ctx, in.d.backoff(a, p.BackoffBaseMS, p.BackoffCapMS)) {
			return false
		}
		if depth > 1 {
			if in.layer(depth - 1) {
				return true
			}
			continue
		}
		dropped := in.d.drop(p.DropPercent)
		delay := in.d.delayMS(p.MaxServerDelayMS)
		if dropped {
			continue
		}
		if status, err := in.send(delay); err == nil && status == http.StatusOK {
			return true
		}
		if in.ctx.Err() != nil {
			return false
		}
	}
	return false
}

// sleep waits d and reports true, or false once ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// saveKey writes and syncs intent i's key to its file, for after a restart.
func (c *rowClient) saveKey(i int, k string) error {
	f, err := os.Create(filepath.Join(c.keys, strconv.Itoa(i)))
	if err != nil {
		return fmt.Errorf("save key: %w", err)
	}
	_, err = f.WriteString(k)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("save key: %w", err)
	}
	return nil
}

// loadKey reads intent i's key back from its file.
func (c *rowClient) loadKey(i int) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.keys, strconv.Itoa(i)))
	if err != nil {
		return "", fmt.Errorf("load key after restart: %w", err)
	}
	return string(b), nil
}

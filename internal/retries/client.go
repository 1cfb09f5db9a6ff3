package retries

import (
	"context"
	"fmt"
	"idemlab/internal/protocol"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// decisions is one intent's random stream: a PCG seeded with the
// experiment's seed and (row, intent), read in a fixed order per attempt
// (drop, delay, then the backoff before the next attempt), so what an
// intent does never depends on which worker runs it or when.
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

// drive sends every intent of one row to url with p.Workers workers. It
// returns an error only when the harness itself broke (or ctx ended);
// failed attempts are the experiment, not errors.
func drive(ctx context.Context, p Parameters, seed uint64, r Row, stream int, url string) error {
	// The lab's client: no keep-alives, so Go's transport adds no retries
	// the client design did not make (see protocol.Client).
	hc := protocol.NewClient(time.Duration(p.ClientTimeoutMS) * time.Millisecond)
	defer hc.Close()
	attempts := p.MaxAttempts
	if r.Client == NeverRetry {
		attempts = 1
	}
	next := make(chan int)
	errs := make([]error, p.Workers)
	var wg sync.WaitGroup
	for w := range p.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := intent(ctx, hc, url, p, seed, r, stream, i, attempts); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		}()
	}
	for i := range p.Intents {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// intent makes up to attempts attempts for intent i until one gets 200.
func intent(ctx context.Context, hc *protocol.Client, url string, p Parameters, seed uint64, r Row, stream, i, attempts int) error {
	d := newDecisions(seed, stream, i)
	var k *string
	if r.Client == RetrySameKey {
		ik := key(stream, i) // once per intent, before the first send
		k = &ik
	}
	b := body(stream, i)
	for n := range attempts {
		if n > 0 {
			t := time.NewTimer(d.backoff(n, p.BackoffBaseMS, p.BackoffCapMS))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		dropped := d.drop(p.DropPercent)
		delay := d.delayMS(p.MaxServerDelayMS)
		if dropped {
			continue // never sent: a failed attempt
		}
		rep, err := hc.Post(ctx, url, protocol.Request{Key: k, Fault: fmt.Sprintf("%s=%dms", protocol.FaultDelay, delay), Body: b})
		if err == nil && rep.Status == http.StatusOK {
			return nil
		}
		// A network error or another status is a failed attempt; only the
		// end of the whole run stops the intent.
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

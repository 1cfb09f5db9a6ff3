package retries

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"idemlab/internal/idemkey"
	"idemlab/internal/labfault"
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
	// Keep-alives off: Go's transport silently re-sends a request that
	// carries an Idempotency-Key when a reused connection fails, which
	// would add retries the client design did not make. One connection
	// per attempt also keeps attempts independent.
	hc := &http.Client{
		Timeout:   time.Duration(p.ClientTimeoutMS) * time.Millisecond,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
	defer hc.CloseIdleConnections()
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
func intent(ctx context.Context, hc *http.Client, url string, p Parameters, seed uint64, r Row, stream, i, attempts int) error {
	d := newDecisions(seed, stream, i)
	var k string
	if r.Client == RetrySameKey {
		k = key(stream, i) // once per intent, before the first send
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
		ok, err := send(ctx, hc, url, k, fmt.Sprintf("delay=%dms", delay), b)
		if err != nil {
			return fmt.Errorf("intent %d attempt %d: %w", i, n+1, err)
		}
		if ok {
			return nil
		}
	}
	return nil
}

// send makes one attempt and reports whether it got 200. Network errors
// and other statuses are failed attempts; only a request that cannot be
// built is an error.
func send(ctx context.Context, hc *http.Client, url, key, fault string, body []byte) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set(labfault.Header, fault)
	if key != "" {
		req.Header.Set(idemkey.Header, key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, nil
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return false, nil
	}
	return resp.StatusCode == http.StatusOK, nil
}

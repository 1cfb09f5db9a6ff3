package labrun

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"idemlab/internal/idemkey"
	"idemlab/internal/labfault"
	"idemlab/internal/observation"
)

// ReplayedHeader says whether a reply was replayed from the registry.
const ReplayedHeader = "Idempotency-Replayed"

// request is one call to make.
type request struct {
	key   *string
	fault string
	body  []byte
}

// client makes the lab's HTTP calls. Keep-alives are off: Go's transport
// silently re-sends a request that carries an Idempotency-Key when a reused
// connection fails, which would hide exactly the retries the lab counts.
// One connection per call also keeps calls independent.
type client struct {
	http *http.Client
}

func newClient(timeout time.Duration) *client {
	return &client{http: &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}}
}

// do makes one call and classifies what came back into a stable outcome.
func (c *client) do(ctx context.Context, url string, r request) (observation.Call, CallDetail) {
	o := observation.Call{Key: r.key}
	if r.fault != "" {
		f := r.fault
		o.Fault = &f
	}
	began := time.Now()
	resp, body, err := c.send(ctx, url, r)
	d := CallDetail{Latency: time.Since(began)}
	if err != nil {
		o.Outcome = classify(err)
		d.Error = err.Error()
		return o, d
	}
	o.Outcome = observation.Reply
	status := resp.StatusCode
	o.Status = &status
	s := string(body)
	o.Body = &s
	switch resp.Header.Get(ReplayedHeader) {
	case "true":
		t := true
		o.Replayed = &t
	case "false":
		f := false
		o.Replayed = &f
	}
	return o, d
}

func (c *client) send(ctx context.Context, url string, r request) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(r.body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "text/plain")
	if r.key != nil {
		req.Header[idemkey.Header] = []string{*r.key} // verbatim: the case may send a malformed key
	}
	if r.fault != "" {
		req.Header.Set(labfault.Header, r.fault)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return resp, body, nil
}

// group makes n identical calls released together and returns them in
// launch order.
func (c *client) group(ctx context.Context, url string, r request, n int) ([]observation.Call, []CallDetail) {
	obs := make([]observation.Call, n)
	dets := make([]CallDetail, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			obs[i], dets[i] = c.do(ctx, url, r)
		}()
	}
	close(start)
	wg.Wait()
	return obs, dets
}

// classify maps a client error to a class that is the same on every machine.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return observation.Refused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return observation.Timeout
	default:
		return observation.NoReply
	}
}

package retries

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"idemlab/internal/client"
	"idemlab/internal/protocol"
)

// gateway is the Retry-After rows' load shedder: an HTTP hop on loopback in
// front of the effect server, as a load balancer with a concurrency limit.
// One request beyond limit in flight is refused with 429 and Retry-After;
// the others pass as they came, and the reply (or its drop) comes back.
// The effect server answers 429 only when its registry is full, which
// waiting does not cure: this is where the lab's transient 429 comes from.
type gateway struct {
	url      string // the gateway's own EffectURL
	upstream string
	limit    int64
	after    string // the Retry-After value
	inflight atomic.Int64
	hc       *http.Client
	srv      *http.Server
}

// startGateway listens on loopback and forwards to upstream.
func startGateway(upstream string, limit, retryAfterS int) (*gateway, error) {
	ln, err := net.Listen("tcp", protocol.DefaultAddr)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g := &gateway{
		url: client.EffectURL(ln.Addr().String()), upstream: upstream, limit: int64(limit),
		after: strconv.Itoa(retryAfterS),
		// No keep-alives, for the reason client.Client gives; no
		// timeout: the caller's own timeout cancels the forwarded request.
		hc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}},
	}
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	g.srv.SetKeepAlivesEnabled(false)
	go g.srv.Serve(ln)
	return g, nil
}

// close stops the gateway and its connections.
func (g *gateway) close() { g.srv.Close() }

// bodyBusy is the gateway's 429 body.
const bodyBusy = "gateway busy: too many requests in flight\n"

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.inflight.Add(1) > g.limit {
		g.inflight.Add(-1)
		w.Header().Set("Retry-After", g.after)
		http.Error(w, bodyBusy, http.StatusTooManyRequests)
		return
	}
	defer g.inflight.Add(-1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		dropConn(w)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, g.upstream, bytes.NewReader(body))
	if err != nil {
		dropConn(w)
		return
	}
	for _, h := range []string{"Content-Type", protocol.KeyHeader, protocol.FaultHeader} {
		if v, ok := r.Header[h]; ok {
			req.Header[h] = v
		}
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		dropConn(w) // no reply from the server (or the caller gave up): none from here
		return
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		dropConn(w)
		return
	}
	for _, h := range []string{"Content-Type", protocol.ReplayedHeader, "Retry-After"} {
		if v, ok := resp.Header[h]; ok {
			w.Header()[h] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(reply)
}

// dropConn closes the connection without a reply.
func dropConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

package caserun

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"syscall"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/sink"
)

// A relay is an effect URL that outlives a run: a shared process's,
// listening for the process's life, or an attached service's sink_addr,
// listening from its target's first run to its last. It forwards each
// call, on a connection of its own, to the sink of the run at hand, and
// between runs answers 503. It answers every call
// with "Connection: close", so that the process makes each call on a new
// connection, as its first call to a fresh sink is made: a client keeps
// no connection from one run to the next, to find it closed (a failure
// of the lab's making) or to resend a call on it when the sink drops its
// reply (Go's client resends a request carrying an Idempotency-Key on a
// reused connection that ended unanswered, which hid a stuck key the zoo
// knows). A call the sink ends without an answer (its drop, its kill)
// ends the process's connection without one too.
type relay struct {
	url string
	srv *http.Server
	ln  net.Listener

	mu sync.Mutex
	to *url.URL // the run's sink URL; nil between runs
}

// relayHeaderWithin bounds reading a call's header at the relay; its body
// and the sink's answer are bounded by the sink (its waits at most
// sink.MaxWait).
const relayHeaderWithin = 10 * time.Second

// relayBindWithin bounds the wait for a named address in use to be free
// (an attached target's sink_addr): the lab's own socket there, closed a
// moment before, stays bound while a child forked at that moment holds a
// copy of it, until the child's exec closes it.
const relayBindWithin = time.Second

// startRelay starts a relay at addr, 127.0.0.1:PORT ("": a free port).
func startRelay(addr string) (*relay, error) {
	ln, err := net.Listen("tcp", cmp.Or(addr, "127.0.0.1:0"))
	for deadline := time.Now().Add(relayBindWithin); addr != "" && errors.Is(err, syscall.EADDRINUSE) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("the relay to the effect sink: listen: %w", err)
	}
	r := &relay{ln: ln, url: "http://" + ln.Addr().String() + protocol.EffectPath + "/0"}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = r.current()
			pr.Out.Host = pr.Out.URL.Host
		},
		// A fresh connection per call: the run's sink closes its own when
		// the run ends.
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			panic(http.ErrAbortHandler) // the sink ended the call unanswered: so does the relay
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	r.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Connection", "close")
			if r.current() == nil {
				http.Error(w, "no run of the lab is under way", http.StatusServiceUnavailable)
				return
			}
			rp.ServeHTTP(w, req)
		}),
		ReadHeaderTimeout: relayHeaderWithin,
		MaxHeaderBytes:    sink.HeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go r.srv.Serve(ln) // returns once close ran
	return r, nil
}

// point sends the calls to come to the sink at rawURL ("": none, 503).
func (r *relay) point(rawURL string) {
	var u *url.URL
	if rawURL != "" {
		u, _ = url.Parse(rawURL) // the sink's own URL: it parses
	}
	r.mu.Lock()
	r.to = u
	r.mu.Unlock()
}

func (r *relay) current() *url.URL {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.to == nil {
		return nil
	}
	u := *r.to
	return &u
}

// close stops the relay and closes every connection to it.
func (r *relay) close() { r.srv.Close() }

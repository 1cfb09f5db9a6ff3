// Package proxy is the fault proxy between the lab's clients and one
// replica of a target (docs/targets.md): a small, boring HTTP/1.1 proxy on
// 127.0.0.1 that speaks just enough HTTP to know where a request and a
// reply end, and places the lab's proxy faults there (Route).
//
// Each client connection carries one request, read whole and forwarded
// byte for byte (header order, case and spacing as sent), less every
// X-Lab-Fault and Connection field and the route's own, plus the route's
// fields ("Connection: close" too for HTTP/1.0). The reply is read whole
// and relayed byte for byte unless a fault drops it; the client's
// connection is then closed. The connection to the replica is kept alive
// for the next exchange (at most idleTimeout, checked still open before
// use; never after a fault, a reply framed by the close or one that asks
// to close), and a request is never sent twice. A replica unreachable or
// closing mid-reply leaves the client unanswered; a client that goes
// first takes the replica's connection with it. The proxy's own refusals
// start "proxy: " (400 malformed or ambiguous framing, 431, 413, 502 for a
// rejected fault or an oversized reply).
//
// The proxy connects only to the replica's address it was given, a port
// on 127.0.0.1 or ::1: Start and SetUpstream refuse any other host.
//
// Every read, dial, write and wait is bounded (the constants below), and
// Close returns within 10 s plus the kills in progress.
package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"idemlab/internal/protocol"
)

// Bounds and defaults.
const (
	DefaultMaxBody = 2 << 20           // a request's or reply's body, by default
	MaxMaxBody     = 64 << 20          // the largest Config.MaxBody accepted
	HeaderBytes    = 16 << 10          // a request's or reply's head: start line, fields, empty line
	MaxConns       = 512               // client connections open at once
	MaxWait        = 60 * time.Second  // the longest Route.Delay or Route.GiveUp
	RequestTimeout = 30 * time.Second  // for the client to send its whole request
	DialTimeout    = 5 * time.Second   // for the replica to accept a connection
	ReplyTimeout   = 150 * time.Second // for the replica's whole reply: longer than the sink's longest waits (2 x 60 s)
	WriteTimeout   = 30 * time.Second  // for each write to either side
	// ContinueWait is how long a request that expects 100 Continue waits
	// for the replica's word before its body is sent anyway (RFC 9110
	// 10.1.1: a server may ignore the expectation, and an HTTP/1.0 one
	// does): Go's default client and curl wait as long.
	ContinueWait = time.Second

	lingerTimeout = 2 * time.Second // after a reply, for the client to close first
	closeWait     = 10 * time.Second
	maxInterim    = 8 // interim (1xx) replies before the final one
)

// A Route is what the proxy does with one request, as Config.Route says
// for its fault.
type Route struct {
	Header      http.Header                                    // added to (replacing) the forwarded request's fields: a fault the target maps natively
	Arm         func(body []byte) (disarm func() (fired bool)) // called with the request body before forwarding; disarm once the exchange ended, saying whether the fault fired; nil: none
	Delay       time.Duration                                  // wait before forwarding (network delay)
	GiveUp      time.Duration                                  // if no reply within GiveUp: close the client's connection unanswered, let the upstream exchange finish (bounded), then close it; 0: never
	DropReply   bool                                           // read the whole reply, then close the client's connection without it
	HoldAndKill bool                                           // read the whole reply, call Kill, then close the client's connection without it
}

// reserved names the fields a Route may not set: the framing the proxy
// forwards as sent. A Route may set X-Lab-Fault: the client's is always
// removed, and a target that honours the lab's own fault header (the lab's
// server run as a target) gets the route's.
var reserved = []string{"Connection", "Content-Length", "Transfer-Encoding", "Host"}

// check reports what is wrong with r, or nil.
func (r Route) check() error {
	if r.Delay < 0 || r.Delay > MaxWait {
		return fmt.Errorf("delay %v out of range 0..%v", r.Delay, MaxWait)
	}
	if r.GiveUp < 0 || r.GiveUp > MaxWait {
		return fmt.Errorf("give-up %v out of range 0..%v", r.GiveUp, MaxWait)
	}
	for name, vals := range r.Header {
		if !protocol.IsFieldName(name) {
			return fmt.Errorf("route header %q is not a field name", name)
		}
		for _, res := range reserved {
			if strings.EqualFold(name, res) {
				return fmt.Errorf("route header %q is the proxy's to set", name)
			}
		}
		for _, v := range vals {
			if strings.ContainsFunc(v, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) {
				return fmt.Errorf("route header %s: value %q holds a control character", name, v)
			}
		}
	}
	return nil
}

// Config configures a proxy.
type Config struct {
	Upstream string                            // host:port of the replica: 127.0.0.1 or ::1 only (checkUpstream)
	Route    func(fault string) (Route, error) // fault = the X-Lab-Fault value ("" when absent); an error answers 502 naming it; required
	Kill     func()                            // kills this replica with SIGKILL, returns once it exited; required
	MaxBody  int64                             // request and reply body bound, 1..MaxMaxBody; default DefaultMaxBody
	Observe  func(Exchange)                    // optional: called once per exchange, once it ended
}

// An Exchange is what became of one request. A connection that closed
// before sending a byte is none.
type Exchange struct {
	Fault   string // the request's X-Lab-Fault value
	Tag     string // the request's X-Lab-Attempt value: the chaos attempt it is
	Status  int    // the replica's final status; 0: no reply from upstream
	Dropped bool   // the reply was read and not relayed (DropReply, HoldAndKill)
	Killed  bool   // Kill ran
	GaveUp  bool   // the client's connection was closed by GiveUp
	// SinkArmed: Route.Arm armed a fault at the effect sink for it;
	// SinkFired: a call of the target to the sink took it before the
	// exchange ended (a target that sends the sink another body, or no
	// call, leaves it unfired: the fault was placed, and did not happen).
	SinkArmed bool
	SinkFired bool
	Err       string // what went wrong, or what the proxy refused, or ""
	Start     time.Time
	End       time.Time
}

// A Proxy is a running fault proxy.
type Proxy struct {
	cfg Config
	ln  net.Listener
	// slots caps the client connections open at once at MaxConns (not
	// protocol.LimitListener: its connections hide CloseWrite, which
	// linger needs).
	slots chan struct{}

	ctx    context.Context // cancelled by Close: ends every exchange
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every exchange
	active atomic.Int64   // client connections being served, until their exchange is observed

	upstream atomic.Pointer[upstream] // where exchanges go
	idle     idlePool                 // the replica's connections kept alive between exchanges

	closeOnce sync.Once
	closeErr  error
}

// Start validates cfg and starts a proxy on 127.0.0.1 at a free port.
func Start(cfg Config) (*Proxy, error) {
	if err := checkUpstream(cfg.Upstream); err != nil {
		return nil, fmt.Errorf("proxy: config: %w", err)
	}
	if cfg.Route == nil {
		return nil, errors.New("proxy: config: no Route function")
	}
	if cfg.Kill == nil {
		return nil, errors.New("proxy: config: no Kill function")
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxBody < 1 || cfg.MaxBody > MaxMaxBody {
		return nil, fmt.Errorf("proxy: config: max body %d out of range 1..%d", cfg.MaxBody, MaxMaxBody)
	}
	// No TCP keep-alive probes on the clients' connections (three
	// setsockopt calls each): every wait on a client is bounded anyway.
	ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	p := &Proxy{cfg: cfg, ln: ln, slots: make(chan struct{}, MaxConns)}
	p.upstream.Store(&upstream{addr: cfg.Upstream})
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetUpstream makes later exchanges go to addr (host:port), as after the
// replica restarted on a new port. Exchanges under way keep theirs. An
// address checkUpstream refuses is an error, and later exchanges then go
// nowhere (each one's Err says why) rather than to the old address.
func (p *Proxy) SetUpstream(addr string) error {
	err := checkUpstream(addr)
	if err != nil {
		err = fmt.Errorf("proxy: set upstream: %w", err)
	}
	p.upstream.Store(&upstream{addr: addr, err: err})
	p.idle.drain()
	return err
}

// An upstream is where exchanges go: addr, unless err refused it.
type upstream struct {
	addr string
	err  error
}

// checkUpstream refuses an upstream address other than a port on
// 127.0.0.1 or ::1, the loopback addresses a replica is started on: the
// proxy connects only to the replica it was started for, never to
// whatever host a target's ready line names (127.0.0.5, another machine,
// a name to resolve).
func checkUpstream(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("upstream %q: %w", addr, err)
	}
	if host != "127.0.0.1" && host != "::1" {
		return fmt.Errorf("upstream %q: host %q is not 127.0.0.1 or ::1: the proxy connects only to the loopback address its replica was started on", addr, host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return fmt.Errorf("upstream %q: port %q is not a number in 1..65535", addr, port)
	}
	return nil
}

// Close stops listening, closes every open exchange, and waits (at most
// 10 s, plus the Kills in progress) for them. It is safe to call more
// than once; every call returns the first one's result.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		err := p.ln.Close()
		p.idle.close()
		done := make(chan struct{})
		go func() {
			p.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(closeWait):
			p.closeErr = fmt.Errorf("proxy: close: exchanges still running after %v", closeWait)
			return
		}
		if err != nil && !errors.Is(err, net.ErrClosed) {
			p.closeErr = fmt.Errorf("proxy: close: %w", err)
		}
	})
	return p.closeErr
}

// Settle waits, at most within, until no client connection is being
// served: every exchange that began has ended and been observed (the
// client may have its reply a moment before its exchange is observed).
// It reports whether the proxy settled; the exchanges go on either way.
func (p *Proxy) Settle(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for p.active.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		select {
		case p.slots <- struct{}{}:
		case <-p.ctx.Done():
			return
		}
		conn, err := p.ln.Accept()
		if err != nil {
			<-p.slots
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A passing failure (out of file descriptors): back off.
			select {
			case <-time.After(50 * time.Millisecond):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		p.wg.Add(1)
		p.active.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.slots }()
			defer p.active.Add(-1)
			p.serve(conn)
		}()
	}
}

// serve runs one exchange on a client connection.
func (p *Proxy) serve(client net.Conn) {
	x := &exchange{p: p, client: client, ex: Exchange{Start: time.Now()}}
	observed := x.run()
	client.Close()
	x.watch.Wait()
	if x.br != nil {
		freeReader(x.br)
	}
	if observed && p.cfg.Observe != nil {
		x.ex.End = time.Now()
		p.cfg.Observe(x.ex)
	}
}

var (
	errClientGone  = errors.New("client closed")
	errProxyClosed = errors.New("proxy closed")
)

// An exchange is the state of one client connection.
type exchange struct {
	p      *Proxy
	ctx    context.Context
	client net.Conn
	rec    *recorder     // the client's bytes
	br     *bufio.Reader // reads rec
	gone   chan struct{} // closed once the client's side ended; nil until watched
	watch  sync.WaitGroup
	ex     Exchange
}

// A request is one client request, read whole.
type request struct {
	*http.Request
	head head   // as sent
	body []byte // decoded
	raw  []byte // the body as framed
}

// run runs the exchange; it reports false for a connection that sent no
// byte (no exchange to observe). The caller closes the client's connection.
func (x *exchange) run() bool {
	ctx, cancel := context.WithCancel(x.p.ctx)
	defer cancel()
	defer context.AfterFunc(ctx, func() { x.client.Close() })()
	x.ctx = ctx

	req, observed := x.read()
	if req == nil {
		return observed
	}
	x.watchClient()
	route, err := x.p.cfg.Route(x.ex.Fault)
	if err == nil {
		err = route.check()
	}
	if err != nil {
		x.refuse(http.StatusBadGateway, fmt.Sprintf("fault %q: %v", x.ex.Fault, err))
		return true
	}
	x.forward(req, route)
	return true
}

// read reads the client's request whole: its head, then its body. It
// returns nil when there is none to forward: observed is then false for a
// connection that sent no byte, true for a request the proxy refused.
func (x *exchange) read() (req *request, observed bool) {
	maxBody := x.p.cfg.MaxBody
	x.client.SetReadDeadline(time.Now().Add(RequestTimeout))
	x.rec = &recorder{r: x.client, n: HeaderBytes, keep: true}
	x.br = newReader(x.rec)
	r, err := http.ReadRequest(x.br)
	if err != nil {
		switch {
		case len(x.rec.buf) == 0:
			return nil, false
		case x.rec.exceeded:
			x.refuse(http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request head over %d bytes", HeaderBytes))
		default:
			x.refuse(http.StatusBadRequest, "bad request: "+err.Error())
		}
		return nil, true
	}
	headLen := len(x.rec.buf) - x.br.Buffered()
	h, err := splitHead(x.rec.buf[:headLen])
	if err != nil { // net/http accepted it: a bug of splitHead
		x.refuse(http.StatusBadRequest, "bad request head: "+err.Error())
		return nil, true
	}
	if h.count(protocol.FaultHeader) > 1 {
		x.refuse(http.StatusBadRequest, "more than one "+protocol.FaultHeader+" field")
		return nil, true
	}
	x.ex.Fault = r.Header.Get(protocol.FaultHeader)
	x.ex.Tag = r.Header.Get(protocol.AttemptHeader)
	if h.count("Transfer-Encoding") > 0 && h.count("Content-Length") > 0 {
		x.refuse(http.StatusBadRequest, "both Transfer-Encoding and Content-Length")
		return nil, true
	}
	if r.ContentLength > maxBody {
		x.refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxBody))
		return nil, true
	}
	if expectsContinue(r) && r.ContentLength != 0 {
		// The client waits for word before it sends its body (Go's client
		// does for a large body): the proxy gives it, then asks the
		// replica the same before forwarding the body (roundTrip).
		x.client.SetWriteDeadline(time.Now().Add(WriteTimeout))
		if _, err := io.WriteString(x.client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return nil, true
		}
	}
	x.rec.n = 2*maxBody + HeaderBytes
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case int64(len(body)) > maxBody || x.rec.exceeded:
		x.refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxBody))
		return nil, true
	case err != nil:
		x.refuse(http.StatusBadRequest, "read request body: "+err.Error())
		return nil, true
	}
	raw := x.rec.buf[headLen : len(x.rec.buf)-x.br.Buffered()]
	return &request{Request: r, head: h, body: body, raw: raw}, true
}

// forward places route's faults on the exchange of req with the replica:
// the delay, the round trip on a fresh connection, then the reply relayed
// or dropped. GiveUp's clock runs from here, the delay included.
func (x *exchange) forward(req *request, route Route) {
	head := forwardHead(req, route)
	w := &waiter{x: x, gone: x.gone}
	if route.GiveUp > 0 {
		t := time.NewTimer(route.GiveUp)
		defer t.Stop()
		w.giveUp = t.C
	}
	if !x.delay(w, route.Delay) {
		return
	}
	if route.Arm != nil {
		if disarm := route.Arm(req.body); disarm != nil {
			x.ex.SinkArmed = true
			defer func() { x.ex.SinkFired = disarm() }()
			// A client that leaves does not end the owner's work: the
			// replica's exchange goes on, and the fault stays armed
			// for its call to the sink (a slow replica calls it after
			// a client's 300 ms timeout).
			w.outlive = true
		}
	}
	u := x.p.upstream.Load()
	if u.err != nil {
		x.ex.Err = "dial upstream: " + u.err.Error()
		return
	}
	up := x.p.idle.get(u.addr)
	if up == nil {
		dialCtx, dialCancel := context.WithTimeout(x.ctx, DialTimeout)
		var err error
		up, err = new(net.Dialer).DialContext(dialCtx, "tcp", u.addr)
		dialCancel()
		if err != nil {
			x.ex.Err = "dial upstream: " + err.Error()
			return
		}
	}
	kept := false
	defer func() {
		if !kept {
			up.Close()
		}
	}()
	stop := context.AfterFunc(x.ctx, func() { up.Close() })
	defer stop()
	rep, err := x.awaitReply(w, up, head, req)
	if err != nil {
		x.ex.Err = err.Error() + " before the reply"
		return
	}
	if w.left {
		// Answered to no one: the client left while the owner worked.
		x.ex.Status = rep.status
		x.ex.Err = errClientGone.Error() + " before the reply; the replica's exchange went on (a fault was armed at the sink for it)"
		if rep.err != nil {
			x.ex.Err += ": " + rep.err.Error()
		}
		return
	}
	x.answer(rep, route, func() {
		// Done with the replica's connection: kept alive for a later
		// exchange when the reply left it clean, else closed.
		if rep.reusable && stop() {
			kept = x.p.idle.put(u.addr, up)
		}
		if !kept {
			up.Close()
		}
	})
}

// forwardHead is req's head as the replica gets it: as sent, less every
// X-Lab-Fault, X-Lab-Attempt and Connection field and every field the route sets, plus
// the route's fields, and "Connection: close" for a request before
// HTTP/1.1 (an HTTP/1.1 request leaves the connection open for the next).
func forwardHead(req *request, route Route) []byte {
	drop := []string{protocol.FaultHeader, protocol.AttemptHeader, "Connection"}
	add := route.Header
	if !req.ProtoAtLeast(1, 1) {
		add = route.Header.Clone()
		if add == nil {
			add = http.Header{}
		}
		add["Connection"] = []string{"close"}
	}
	for name := range add {
		drop = append(drop, name)
	}
	return req.head.edit(drop, add)
}

// A waiter waits for one step of an exchange while the client may leave,
// GiveUp may let it go, or Close may end the exchange. Its state outlives
// each wait: once GiveUp fired, the client's leaving no longer matters.
type waiter struct {
	x      *exchange
	giveUp <-chan time.Time // nil without GiveUp, or once it fired
	gone   <-chan struct{}  // the client's side ended; nil once GiveUp let the client go, or once it left an exchange that outlives it
	// outlive: the exchange goes on when the client leaves (a fault is
	// armed at the sink for it), its reply then answered to no one.
	outlive bool
	left    bool // the client left an exchange that outlives it
}

// wait waits for done: nil when it closed, else why the exchange ends.
func (w *waiter) wait(done <-chan struct{}) error {
	for {
		select {
		case <-done:
			if w.x.ctx.Err() != nil {
				// Close closes the replica's connection too, which
				// ends done: the exchange was ended by Close.
				return errProxyClosed
			}
			return nil
		case <-w.giveUp:
			w.giveUp, w.gone = nil, nil
			w.x.ex.GaveUp = true
			w.x.client.Close()
		case <-w.gone:
			if !w.outlive {
				return w.x.goneErr()
			}
			w.giveUp, w.gone, w.left = nil, nil, true
		case <-w.x.ctx.Done():
			return errProxyClosed
		}
	}
}

// delay waits out the route's delay d, then checks that the client is
// still there to forward for. It reports false, with x.ex.Err saying why,
// when the exchange ends before forwarding.
func (x *exchange) delay(w *waiter, d time.Duration) bool {
	if d > 0 {
		delayed := make(chan struct{})
		t := time.AfterFunc(d, func() { close(delayed) })
		defer t.Stop()
		if err := w.wait(delayed); err != nil {
			x.ex.Err = err.Error() + " during the delay"
			return false
		}
	}
	select {
	case <-w.gone: // nil once GiveUp let the client go
		x.ex.Err = x.goneErr().Error() + " before forwarding"
		return false
	default:
	}
	return true
}

// awaitReply runs roundTrip with the replica in a goroutine and waits for
// its reply with w. An error means the exchange ended first; the
// replica's connection is then closed and the goroutine has returned.
func (x *exchange) awaitReply(w *waiter, up net.Conn, head []byte, req *request) (reply, error) {
	var rep reply
	replied := make(chan struct{})
	go func() {
		defer close(replied)
		rep = roundTrip(up, head, req.raw, req.Request, x.p.cfg.MaxBody)
	}()
	if err := w.wait(replied); err != nil {
		up.Close()
		<-replied
		return reply{}, err
	}
	return rep, nil
}

// answer does with the replica's reply what the route says: nothing once
// GiveUp let the client go, drop it (after Kill for HoldAndKill), or relay
// it and linger. A reply that broke a bound is answered 502 instead.
// release is called, before the reply is relayed, when the replica's
// connection is no longer needed; otherwise the caller closes it.
func (x *exchange) answer(rep reply, route Route, release func()) {
	if rep.err != nil {
		x.ex.Err = rep.err.Error()
		if rep.overBound && !x.ex.GaveUp {
			x.refuse(http.StatusBadGateway, rep.err.Error())
		}
		return
	}
	x.ex.Status = rep.status
	switch {
	case x.ex.GaveUp:
		return
	case route.HoldAndKill:
		x.ex.Dropped = true
		x.p.cfg.Kill()
		x.ex.Killed = true
		return
	case route.DropReply:
		x.ex.Dropped = true
		return
	}
	release()
	x.client.SetWriteDeadline(time.Now().Add(WriteTimeout))
	if _, err := x.client.Write(rep.raw); err != nil {
		x.ex.Err = "write reply: " + err.Error()
		return
	}
	x.linger()
}

// watchClient reads (and throws away) whatever the client sends after its
// request, closing x.gone once its side ended.
func (x *exchange) watchClient() {
	x.rec.keep = false
	x.rec.n = math.MaxInt64
	x.client.SetReadDeadline(time.Time{})
	x.gone = make(chan struct{})
	x.watch.Add(1)
	go func() {
		defer x.watch.Done()
		io.Copy(io.Discard, x.br)
		close(x.gone)
	}()
}

// goneErr says why the client's side ended: Close closes the client's
// connection too, so a client gone while the proxy is closing was sent
// away by Close (the two arrive together, and a select picks either).
func (x *exchange) goneErr() error {
	if x.ctx.Err() != nil {
		return errProxyClosed
	}
	return errClientGone
}

// refuse answers the client with the proxy's own reply.
func (x *exchange) refuse(status int, msg string) {
	x.ex.Err = msg
	if x.gone == nil {
		x.watchClient()
	}
	body := "proxy: " + msg + "\n"
	x.client.SetWriteDeadline(time.Now().Add(WriteTimeout))
	_, err := fmt.Fprintf(x.client, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	if err == nil {
		x.linger()
	}
}

// linger ends the client's sending side and waits, bounded, for the
// client to close first, so that bytes it is still sending do not reset
// the connection before it read the reply.
func (x *exchange) linger() {
	if cw, ok := x.client.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	t := time.NewTimer(lingerTimeout)
	defer t.Stop()
	select {
	case <-x.gone:
	case <-t.C:
	case <-x.ctx.Done():
	}
}

// A reply is what came back from the replica.
type reply struct {
	raw       []byte // as sent: interim replies, the final one, its body
	status    int
	err       error
	overBound bool // err says the reply broke a bound
	reusable  bool // the connection may carry another request (reusable)
}

// roundTrip writes the request and reads the whole reply.
func roundTrip(up net.Conn, head, body []byte, req *http.Request, maxBody int64) reply {
	up.SetWriteDeadline(time.Now().Add(WriteTimeout))
	rec := &recorder{r: up, n: HeaderBytes, keep: true}
	br := newReader(rec)
	defer freeReader(br)
	if expectsContinue(req) && len(body) > 0 {
		// The client was told to go on (read): the replica now gets the
		// same choice, so a replica that refuses the body (413) answers
		// before it is sent, and never closes on a body it did not read.
		if _, err := up.Write(head); err != nil {
			return reply{err: fmt.Errorf("write request head: %w", err)}
		}
		up.SetReadDeadline(time.Now().Add(ContinueWait))
		resp, err := http.ReadResponse(br, req)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded) && len(rec.buf) == 0:
			// No word from the replica: the body goes anyway.
			return sendBodyAndRead(up, rec, br, body, req, maxBody)
		case err != nil:
			return readError(rec, err)
		case resp.StatusCode != http.StatusContinue:
			rep := finishReply(rec, br, req, resp, maxBody)
			rep.reusable = false // the body was never sent
			return rep
		}
		// The client has had the proxy's own 100 Continue: this one is
		// not relayed.
		rec.buf = rec.buf[len(rec.buf)-br.Buffered():]
		up.SetReadDeadline(time.Now().Add(ReplyTimeout))
		if _, err := up.Write(body); err != nil {
			return reply{err: fmt.Errorf("write request body: %w", err)}
		}
		return readReply(rec, br, req, maxBody)
	}
	bufs := net.Buffers{head, body}
	_, werr := bufs.WriteTo(up)
	up.SetReadDeadline(time.Now().Add(ReplyTimeout))
	rep := readReply(rec, br, req, maxBody)
	if rep.err != nil && werr != nil {
		rep.err = fmt.Errorf("write request: %v; %w", werr, rep.err)
	}
	rep.reusable = rep.reusable && werr == nil
	return rep
}

// sendBodyAndRead sends body, the rest of a request whose head went
// without an answer within ContinueWait, while it reads the reply: a
// replica that answers early (413) and reads no more has its reply taken
// at once, the body's write then cut short and the connection not kept.
// A late 100 Continue is an interim reply like any other.
func sendBodyAndRead(up net.Conn, rec *recorder, br *bufio.Reader, body []byte, req *http.Request, maxBody int64) reply {
	up.SetReadDeadline(time.Now().Add(ReplyTimeout))
	wrote := make(chan error, 1)
	go func() {
		_, err := up.Write(body)
		wrote <- err
	}()
	rep := readReply(rec, br, req, maxBody)
	var werr error
	select {
	case werr = <-wrote:
	default:
		up.SetWriteDeadline(time.Unix(1, 0)) // ends the write
		werr = <-wrote
	}
	if werr != nil {
		rep.reusable = false
		if rep.err != nil {
			rep.err = fmt.Errorf("write request body: %v; %w", werr, rep.err)
		}
	}
	return rep
}

// expectsContinue reports whether req asks to be told to send its body:
// an HTTP/1.0 request's expectation is ignored (RFC 9110 10.1.1), and its
// client gets no interim reply it could not read.
func expectsContinue(req *http.Request) bool {
	return req.ProtoAtLeast(1, 1) && strings.EqualFold(strings.TrimSpace(req.Header.Get("Expect")), "100-continue")
}

// readReply reads one whole reply to req from br, which reads rec.
func readReply(rec *recorder, br *bufio.Reader, req *http.Request, maxBody int64) reply {
	var resp *http.Response
	for interim := 0; ; interim++ {
		var err error
		resp, err = http.ReadResponse(br, req)
		if err != nil {
			return readError(rec, err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if interim == maxInterim {
			return reply{err: fmt.Errorf("more than %d interim replies", maxInterim), overBound: true}
		}
	}
	return finishReply(rec, br, req, resp, maxBody)
}

// readError says why no reply head could be read.
func readError(rec *recorder, err error) reply {
	switch {
	case rec.exceeded:
		return reply{err: fmt.Errorf("reply head over %d bytes", HeaderBytes), overBound: true}
	case len(rec.buf) == 0:
		return reply{err: fmt.Errorf("no reply: %w", err)}
	default:
		return reply{err: fmt.Errorf("read reply: %w", err)}
	}
}

// finishReply reads the body of the final reply resp.
func finishReply(rec *recorder, br *bufio.Reader, req *http.Request, resp *http.Response, maxBody int64) reply {
	rec.n = 2*maxBody + HeaderBytes
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody+1)) // rec keeps it
	switch {
	case n > maxBody || rec.exceeded:
		return reply{err: fmt.Errorf("reply body over %d bytes", maxBody), overBound: true}
	case err != nil:
		return reply{err: fmt.Errorf("read reply body: %w", err)}
	}
	return reply{raw: rec.buf[:len(rec.buf)-br.Buffered()], status: resp.StatusCode, reusable: reusable(req, resp, br)}
}

// reusable reports whether the connection that carried req and its whole
// reply resp (read from br) may carry another request: both HTTP/1.1 or
// later (the request was forwarded without its Connection fields), the
// reply not asking to close, the reply framed by its length (not by
// the close), no protocol switch, and no byte after it.
func reusable(req *http.Request, resp *http.Response, br *bufio.Reader) bool {
	return req.ProtoAtLeast(1, 1) && resp.ProtoAtLeast(1, 1) && !resp.Close &&
		resp.StatusCode != http.StatusSwitchingProtocols && br.Buffered() == 0
}

// readers holds the 4 KiB readers of exchanges that ended.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

func newReader(r io.Reader) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

// freeReader gives back br, once nothing reads it.
func freeReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
}

// A recorder passes reads from r through, keeping a copy of every byte
// while keep is set, and refuses to read past n bytes (setting exceeded).
type recorder struct {
	r        io.Reader
	n        int64
	keep     bool
	buf      []byte
	exceeded bool
}

var errBound = errors.New("over the proxy's bound")

func (c *recorder) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.exceeded = true
		return 0, errBound
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	k, err := c.r.Read(p)
	c.n -= int64(k)
	if c.keep {
		c.buf = append(c.buf, p[:k]...)
	}
	return k, err
}

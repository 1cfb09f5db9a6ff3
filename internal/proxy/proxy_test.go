package proxy_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idemlab/internal/proxy"
	"idemlab/internal/serverproc"
	"idemlab/internal/sink"
	"idemlab/internal/sink/sinktest"
)

// The test binary doubles as a target process (package sinktest).
// TestMain runs up to 8 parallel tests at once unless -parallel gives
// another number: the parallel ones mostly wait a second each for a
// proxy's timers, and the default, GOMAXPROCS, is 2 on the lab's machine.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.parallel"); f.Value.String() == f.DefValue {
		f.Value.Set("8")
	}
	os.Exit(sinktest.Main(m))
}

// bound fails a hung test: nothing here should come near it.
const bound = 30 * time.Second

// noFaults routes a request without a fault and rejects every fault.
func noFaults(fault string) (proxy.Route, error) {
	if fault != "" {
		return proxy.Route{}, fmt.Errorf("unknown fault %q", fault)
	}
	return proxy.Route{}, nil
}

// startProxy starts a proxy closed when t ends, with noFaults unless
// cfg.Route is set, and a Kill that fails t unless cfg.Kill is set; it
// returns the exchanges the proxy observes.
func startProxy(t *testing.T, cfg proxy.Config) (*proxy.Proxy, <-chan proxy.Exchange) {
	t.Helper()
	if cfg.Route == nil {
		cfg.Route = noFaults
	}
	if cfg.Kill == nil {
		cfg.Kill = func() { t.Error("unexpected kill") }
	}
	observed := make(chan proxy.Exchange, 16)
	cfg.Observe = func(e proxy.Exchange) { observed <- e }
	p, err := proxy.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p, observed
}

// next returns the next exchange observed, failing a hung test.
func next(t *testing.T, observed <-chan proxy.Exchange) proxy.Exchange {
	t.Helper()
	return receive(t, observed, "no exchange observed")
}

// receive returns the next value on ch, failing t with what when none
// comes within the tests' bound.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bound):
		t.Fatalf("%s within %v", what, bound)
		var zero T
		return zero
	}
}

// send sends raw to addr and returns every byte that came back before the
// connection ended.
func send(t *testing.T, addr, raw string) []byte {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, bound)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(bound))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read reply: %v (after %q)", err, got)
	}
	return got
}

// rawTarget serves each connection with handle on a loopback port until t
// ends, and returns its address.
func rawTarget(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(bound))
				handle(c)
			})
		}
	})
	return ln.Addr().String()
}

// httpTarget serves h with net/http on a loopback port until t ends.
func httpTarget(t testing.TB, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Ensure an exchange is byte-faithful both ways: the replica receives the
// client's request head and body as sent, less the fault and Connection
// fields, plus the route's fields, and Connection: close for HTTP/1.0 only
// (no Content-Type appears, odd but legal key bytes stay, framing stays),
// and nothing after it; the client receives the replica's reply as sent,
// interim replies and trailers included.
func TestByteFaithful(t *testing.T) {
	const oddKey = "\x80k\xff \"q\"\t!#$%&'*+-.^_`|~ end"
	routes := func(fault string) (proxy.Route, error) {
		switch fault {
		case "crash-after-effect":
			return proxy.Route{Header: http.Header{"X-Test-Crash": {"yes"}}}, nil
		case "stall=5ms":
			return proxy.Route{Header: http.Header{"X-Lab-Fault": {"stall=5ms"}}}, nil
		}
		return noFaults(fault)
	}
	tests := []struct {
		name      string
		request   string // what the client sends
		forwarded string // what the replica must receive
		reply     string // what the replica answers, and the client must receive
		status    int
		fault     string
		tag       string
	}{{
		name:      "no Content-Type, an odd key, fields in their order and case",
		request:   "POST /effect HTTP/1.1\r\nHost: proxy\r\nidempotency-KEY: " + oddKey + "\r\nConnection: close\r\nz-last: 1\r\nContent-Length: 5\r\n\r\nhello",
		forwarded: "POST /effect HTTP/1.1\r\nHost: proxy\r\nidempotency-KEY: " + oddKey + "\r\nz-last: 1\r\nContent-Length: 5\r\n\r\nhello",
		reply:     "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nIdempotency-Replayed: false\r\nx-b: 2\r\nX-A: 1\r\nContent-Length: 1\r\n\r\n1",
		status:    200,
	}, {
		name:      "a native fault becomes the target's own field",
		request:   "POST /effect HTTP/1.1\r\nHost: proxy\r\nX-Lab-Fault: crash-after-effect\r\nIdempotency-Key: k\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\npay",
		forwarded: "POST /effect HTTP/1.1\r\nHost: proxy\r\nIdempotency-Key: k\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nX-Test-Crash: yes\r\n\r\npay",
		reply:     "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
		status:    500,
		fault:     "crash-after-effect",
	}, {
		name:      "a chaos attempt's tag is the proxy's, never the target's",
		request:   "POST /effect HTTP/1.1\r\nHost: proxy\r\nX-Lab-Attempt: 12.3\r\nX-Lab-Fault: crash-after-effect\r\nContent-Length: 3\r\n\r\npay",
		forwarded: "POST /effect HTTP/1.1\r\nHost: proxy\r\nContent-Length: 3\r\nX-Test-Crash: yes\r\n\r\npay",
		reply:     "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1",
		status:    200,
		fault:     "crash-after-effect",
		tag:       "12.3",
	}, {
		name:      "a target that honours the lab's own fault field gets the route's",
		request:   "POST /effect HTTP/1.1\r\nHost: proxy\r\nX-Lab-Fault: stall=5ms\r\nContent-Length: 3\r\n\r\npay",
		forwarded: "POST /effect HTTP/1.1\r\nHost: proxy\r\nContent-Length: 3\r\nX-Lab-Fault: stall=5ms\r\n\r\npay",
		reply:     "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1",
		status:    200,
		fault:     "stall=5ms",
	}, {
		name:      "chunked both ways, trailers and an interim reply kept",
		request:   "POST /effect HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: v\r\n\r\n",
		forwarded: "POST /effect HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: v\r\n\r\n",
		reply:     "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-R\r\n\r\n3\r\nabc\r\n0\r\nX-R: w\r\n\r\n",
		status:    200,
	}, {
		name:      "bare line feeds, Pragma without Cache-Control, a reply without a body",
		request:   "GET /x?y=1 HTTP/1.1\nHost: proxy\nPragma: no-cache\n\n",
		forwarded: "GET /x?y=1 HTTP/1.1\nHost: proxy\nPragma: no-cache\n\n",
		reply:     "HTTP/1.1 204 No Content\r\nX: y\r\n\r\n",
		status:    204,
	}, {
		name:      "HTTP/1.0, a reply ended by closing",
		request:   "POST /effect HTTP/1.0\r\nContent-Length: 1\r\n\r\na",
		forwarded: "POST /effect HTTP/1.0\r\nContent-Length: 1\r\nConnection: close\r\n\r\na",
		reply:     "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close",
		status:    200,
	}, {
		name:      "HEAD: a length but no body",
		request:   "HEAD /effect HTTP/1.1\r\nHost: proxy\r\n\r\n",
		forwarded: "HEAD /effect HTTP/1.1\r\nHost: proxy\r\n\r\n",
		reply:     "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
		status:    200,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each waits a second for its proxy to close an idle connection
			type seen struct {
				got, extra []byte
				err        error
			}
			received := make(chan seen, 1)
			addr := rawTarget(t, func(c net.Conn) {
				got := make([]byte, len(tt.forwarded))
				_, err := io.ReadFull(c, got)
				if err == nil {
					_, err = io.WriteString(c, tt.reply)
				}
				c.(*net.TCPConn).CloseWrite()
				extra, _ := io.ReadAll(c) // until the proxy closes (an idle connection: after a second)
				received <- seen{got, extra, err}
			})
			p, observed := startProxy(t, proxy.Config{Upstream: addr, Route: routes})
			got := send(t, p.Addr(), tt.request)
			r := <-received
			if r.err != nil || string(r.got) != tt.forwarded || len(r.extra) > 0 {
				t.Errorf("replica received %q + %q (%v),\nwant %q", r.got, r.extra, r.err, tt.forwarded)
			}
			if string(got) != tt.reply {
				t.Errorf("client received %q,\nwant %q", got, tt.reply)
			}
			if e := next(t, observed); e.Status != tt.status || e.Fault != tt.fault || e.Tag != tt.tag || e.Err != "" || e.Dropped || e.Killed || e.GaveUp {
				t.Errorf("observed %+v, want status %d, fault %q, tag %q", e, tt.status, tt.fault, tt.tag)
			}
		})
	}
}

// Ensure a net/http target sees what the client sent through the proxy —
// the key's bytes, no Content-Type, no fault, no Connection: close (the
// client's is the proxy's: the target's connection stays open) — and a
// net/http client gets the target's reply.
func TestThroughNetHTTP(t *testing.T) {
	const key = "k\x80\xff \"quoted\" ~"
	type seen struct {
		key, body    []string
		hasCT, fault bool
		close        bool
	}
	got := make(chan seen, 1)
	addr := httpTarget(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, hasCT := r.Header["Content-Type"]
		_, fault := r.Header["X-Lab-Fault"]
		got <- seen{r.Header["Idempotency-Key"], []string{string(b)}, hasCT, fault, r.Close}
		w.Header().Set("Idempotency-Replayed", "false")
		w.Header()["X-Raw-Case"] = []string{"v"}
		io.WriteString(w, "7")
	})
	p, observed := startProxy(t, proxy.Config{Upstream: addr})
	req, err := http.NewRequest("POST", "http://"+p.Addr()+"/effect", strings.NewReader("pay"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header["Idempotency-Key"] = []string{key}
	req.Close = true
	resp, err := (&http.Client{Timeout: bound}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != "7" || resp.Header.Get("Idempotency-Replayed") != "false" || resp.Header.Get("X-Raw-Case") != "v" {
		t.Errorf("client got %d %q %v (%v)", resp.StatusCode, body, resp.Header, err)
	}
	s := <-got
	if len(s.key) != 1 || s.key[0] != key || s.body[0] != "pay" || s.hasCT || s.fault || s.close {
		t.Errorf("target saw %+v, want key %q, body pay, no Content-Type, no fault, no Connection: close", s, key)
	}
	if e := next(t, observed); e.Status != 200 || e.Err != "" {
		t.Errorf("observed %+v", e)
	}
}

// Ensure a client that asks to be told to send its body (Expect:
// 100-continue, as Go's client does for a large one) gets a replica's
// early refusal every time, and a body the replica takes arrives whole:
// the proxy says "go on" to the client and asks the replica the same, so
// neither side ever closes on a body it did not read.
func TestExpectContinue(t *testing.T) {
	const limit = 4096
	addr := httpTarget(t, func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			w.WriteHeader(http.StatusRequestEntityTooLarge) // the body is never read
			return
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprint(w, len(b))
	})
	p, observed := startProxy(t, proxy.Config{Upstream: addr})
	hc := &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true, ExpectContinueTimeout: bound}}
	post := func(n int) (int, string) {
		req, err := http.NewRequest("POST", "http://"+p.Addr()+"/effect", strings.NewReader(strings.Repeat("x", n)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Expect", "100-continue")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 50 {
		if status, body := post(512 << 10); status != 413 {
			t.Fatalf("try %d: a 512 KiB body got %d %q, want 413 every time", i, status, body)
		}
		next(t, observed)
	}
	if status, body := post(limit); status != 200 || body != "4096" {
		t.Fatalf("a body at the limit got %d %q, want 200 and its whole length", status, body)
	}
}

// Ensure each way an exchange can end short of a relayed reply: a dropped
// reply (the replica handled it, the client got nothing), the proxy's own
// refusals (nothing forwarded), a replica that cannot be reached or closes
// without a complete reply (the client gets nothing), and a reply over the
// bounds (502).
func TestFaults(t *testing.T) {
	const post = "POST /effect HTTP/1.1\r\nHost: proxy\r\nContent-Length: 3\r\n"
	routes := func(fault string) (proxy.Route, error) {
		switch fault {
		case "drop-reply":
			return proxy.Route{DropReply: true}, nil
		case "delay=1ms":
			return proxy.Route{Delay: time.Millisecond}, nil
		case "too-slow":
			return proxy.Route{Delay: proxy.MaxWait + time.Millisecond}, nil
		case "sets-host":
			return proxy.Route{Header: http.Header{"host": {"x"}}}, nil
		case "bad-value":
			return proxy.Route{Header: http.Header{"X-Crash": {"a\r\nb"}}}, nil
		}
		return noFaults(fault)
	}
	answer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
	}
	tests := []struct {
		name    string
		http    http.HandlerFunc // the replica, with net/http
		raw     func(net.Conn)   // or raw; neither: nothing listens
		maxBody int64
		request string
		reply   string // the client's bytes: "" for none; a prefix ending in "..." for a proxy reply
		handled int    // requests the replica got
		status  int    // observed
		dropped bool
		err     string // observed, a prefix
	}{{
		name: "drop-reply: handled, nothing relayed", http: answer(200, "1"),
		request: post + "X-Lab-Fault: drop-reply\r\n\r\npay", handled: 1, status: 200, dropped: true,
	}, {
		name: "a delay, then the reply", http: answer(200, "1"),
		request: post + "X-Lab-Fault: delay=1ms\r\n\r\npay", reply: "HTTP/1.1 200 OK\r\n...", handled: 1, status: 200,
	}, {
		name: "a fault Route rejects is 502 naming it", http: answer(200, "1"),
		request: post + "X-Lab-Fault: bogus\r\n\r\npay",
		reply:   "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 44\r\nConnection: close\r\n\r\nproxy: fault \"bogus\": unknown fault \"bogus\"\n",
		err:     `fault "bogus": unknown fault "bogus"`,
	}, {
		name: "a route over the bounds is 502", http: answer(200, "1"),
		request: post + "X-Lab-Fault: too-slow\r\n\r\npay", reply: "HTTP/1.1 502 Bad Gateway\r\n...",
		err: `fault "too-slow": delay 1m0.001s out of range 0..1m0s`,
	}, {
		name: "a route setting a framing field is 502", http: answer(200, "1"),
		request: post + "X-Lab-Fault: sets-host\r\n\r\npay", reply: "HTTP/1.1 502 Bad Gateway\r\n...",
		err: `fault "sets-host": route header "host" is the proxy's to set`,
	}, {
		name: "a route value with a line break is 502", http: answer(200, "1"),
		request: post + "X-Lab-Fault: bad-value\r\n\r\npay", reply: "HTTP/1.1 502 Bad Gateway\r\n...",
		err: `fault "bad-value": route header X-Crash: value "a\r\nb" holds a control character`,
	}, {
		name: "two fault fields are 400", http: answer(200, "1"),
		request: post + "X-Lab-Fault: drop-reply\r\nx-lab-fault: delay=1ms\r\n\r\npay", reply: "HTTP/1.1 400 Bad Request\r\n...",
		err: "more than one X-Lab-Fault field",
	}, {
		name: "Transfer-Encoding with Content-Length is 400", http: answer(200, "1"),
		request: post + "Transfer-Encoding: chunked\r\n\r\n3\r\npay\r\n0\r\n\r\n", reply: "HTTP/1.1 400 Bad Request\r\n...",
		err: "both Transfer-Encoding and Content-Length",
	}, {
		name: "a malformed request is 400", http: answer(200, "1"),
		request: "POST /effect HTTP/1.1\r\nno colon here\r\n\r\n", reply: "HTTP/1.1 400 Bad Request\r\n...",
		err: "bad request: ",
	}, {
		name: "a head over HeaderBytes is 431", http: answer(200, "1"),
		request: padded(post, proxy.HeaderBytes+1) + "pay", reply: "HTTP/1.1 431 Request Header Fields Too Large\r\n...",
		err: "request head over 16384 bytes",
	}, {
		name: "a head of HeaderBytes is forwarded", http: answer(200, "1"),
		request: padded(post, proxy.HeaderBytes) + "pay", reply: "HTTP/1.1 200 OK\r\n...", handled: 1, status: 200,
	}, {
		name: "a body over MaxBody is 413", http: answer(200, "1"), maxBody: 2,
		request: post + "\r\npay", reply: "HTTP/1.1 413 Request Entity Too Large\r\n...",
		err: "request body over 2 bytes",
	}, {
		name: "a chunked body over MaxBody is 413", http: answer(200, "1"), maxBody: 2,
		request: "POST / HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n3\r\npay\r\n0\r\n\r\n", reply: "HTTP/1.1 413 Request Entity Too Large\r\n...",
		err: "request body over 2 bytes",
	}, {
		name: "a reply body at MaxBody is relayed", http: answer(200, "123"), maxBody: 3,
		request: "POST / HTTP/1.1\r\nHost: p\r\nContent-Length: 1\r\n\r\na", reply: "HTTP/1.1 200 OK\r\n...", handled: 1, status: 200,
	}, {
		name: "a reply body over MaxBody is 502", http: answer(200, "1234"), maxBody: 3,
		request: "POST / HTTP/1.1\r\nHost: p\r\nContent-Length: 1\r\n\r\na", reply: "HTTP/1.1 502 Bad Gateway\r\n...", handled: 1,
		err: "reply body over 3 bytes",
	}, {
		name: "a reply head over HeaderBytes is 502",
		raw: func(c net.Conn) {
			readRequest(c)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Pad: %s\r\n\r\n", strings.Repeat("p", proxy.HeaderBytes))
		},
		request: post + "\r\npay", reply: "HTTP/1.1 502 Bad Gateway\r\n...", handled: 1,
		err: "reply head over 16384 bytes",
	}, {
		name:    "a replica that cannot be reached: no reply",
		request: post + "\r\npay", err: "dial upstream: ",
	}, {
		name:    "a replica that closes without a reply: no reply",
		raw:     func(c net.Conn) { readRequest(c) },
		request: post + "\r\npay", handled: 1, err: "no reply: ",
	}, {
		name: "a replica that closes mid-reply: no reply",
		raw: func(c net.Conn) {
			readRequest(c)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345")
		},
		request: post + "\r\npay", handled: 1, err: "read reply body: unexpected EOF",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var handled atomic.Int32
			addr := closedAddr(t)
			switch {
			case tt.http != nil:
				addr = httpTarget(t, func(w http.ResponseWriter, r *http.Request) {
					handled.Add(1)
					tt.http(w, r)
				})
			case tt.raw != nil:
				addr = rawTarget(t, func(c net.Conn) {
					handled.Add(1)
					tt.raw(c)
				})
			}
			p, observed := startProxy(t, proxy.Config{Upstream: addr, Route: routes, MaxBody: tt.maxBody})
			got := string(send(t, p.Addr(), tt.request))
			if prefix, ok := strings.CutSuffix(tt.reply, "..."); ok && !strings.HasPrefix(got, prefix) || !ok && got != tt.reply {
				t.Errorf("client received %q, want %q", got, tt.reply)
			}
			e := next(t, observed)
			if e.Status != tt.status || e.Dropped != tt.dropped || e.Killed || e.GaveUp || !strings.HasPrefix(e.Err, tt.err) || (tt.err == "") != (e.Err == "") {
				t.Errorf("observed %+v, want status %d, dropped %v, err %q", e, tt.status, tt.dropped, tt.err)
			}
			if got := int(handled.Load()); got != tt.handled {
				t.Errorf("the replica got %d requests, want %d", got, tt.handled)
			}
		})
	}
}

// padded completes head with a field that makes it n bytes long, the
// empty line included.
func padded(head string, n int) string {
	const name, end = "X-Pad: ", "\r\n\r\n"
	return head + name + strings.Repeat("p", n-len(head)-len(name)-len(end)) + end
}

// readRequest reads one request head and a 3-byte body from c.
func readRequest(c net.Conn) {
	var b []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(b, []byte("\r\n\r\n")) {
		if _, err := c.Read(one); err != nil {
			return
		}
		b = append(b, one[0])
	}
	io.ReadFull(c, make([]byte, 3))
}

// Ensure GiveUp leaves the client without a reply while the replica is
// still working, and lets the replica finish (its connection stays open
// until it replied).
func TestGiveUp(t *testing.T) {
	release := make(chan struct{})
	finished := make(chan error, 1)
	addr := httpTarget(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		finished <- r.Context().Err() // nil: the proxy kept the connection
		io.WriteString(w, "1")
	})
	routes := func(fault string) (proxy.Route, error) {
		return proxy.Route{GiveUp: time.Millisecond}, nil
	}
	p, observed := startProxy(t, proxy.Config{Upstream: addr, Route: routes})
	if got := send(t, p.Addr(), "POST /effect HTTP/1.1\r\nHost: p\r\nX-Lab-Fault: give-up\r\nContent-Length: 3\r\n\r\npay"); len(got) > 0 {
		t.Fatalf("client received %q, want nothing", got)
	}
	close(release)
	if err := <-finished; err != nil {
		t.Errorf("the replica's request ended early: %v", err)
	}
	if e := next(t, observed); !e.GaveUp || e.Status != 200 || e.Dropped || e.Err != "" {
		t.Errorf("observed %+v, want gave up, the replica's 200", e)
	}
}

// Ensure a client that leaves early takes the replica's connection with
// it, and one that leaves during a delay is never forwarded.
func TestClientLeaves(t *testing.T) {
	arrived := make(chan struct{}, 1)
	upstreamClosed := make(chan struct{})
	var hits atomic.Int32
	addr := httpTarget(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // net/http watches the connection once the body was read
		hits.Add(1)
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			close(upstreamClosed)
		case <-time.After(bound):
		}
	})
	routes := func(fault string) (proxy.Route, error) {
		if fault == "delay" {
			return proxy.Route{Delay: proxy.MaxWait}, nil
		}
		return proxy.Route{}, nil
	}
	p, observed := startProxy(t, proxy.Config{Upstream: addr, Route: routes})
	dial := func(fault string) net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /effect HTTP/1.1\r\nHost: p\r\nX-Lab-Fault: %s\r\nContent-Length: 3\r\n\r\npay", fault)
		return c
	}

	c := dial("none")
	<-arrived
	c.Close()
	select {
	case <-upstreamClosed:
	case <-time.After(bound):
		t.Fatal("the replica's connection stayed open after the client left")
	}
	if e := next(t, observed); e.Err != "client closed before the reply" || e.Status != 0 {
		t.Errorf("observed %+v", e)
	}

	dial("delay").Close()
	if e := next(t, observed); e.Err != "client closed during the delay" {
		t.Errorf("observed %+v", e)
	}
	if got := hits.Load(); got != 1 {
		t.Errorf("the replica got %d requests, want 1 (none after a delay the client left)", got)
	}
}

// Ensure hold-and-kill against a real target process: the target produced
// its reply (its marker is written), and it was dead before the client saw
// the connection end, with nothing relayed.
func TestHoldAndKill(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	tg := sinktest.StartTarget(t, sinktest.Options{Marker: marker})
	routes := func(fault string) (proxy.Route, error) {
		return proxy.Route{HoldAndKill: true}, nil
	}
	p, observed := startProxy(t, proxy.Config{Upstream: tg.Addr, Route: routes, Kill: tg.Kill})
	got := send(t, p.Addr(), "POST /effect HTTP/1.1\r\nHost: p\r\nX-Lab-Fault: crash-after-record\r\nContent-Length: 3\r\n\r\npay")
	if !tg.Exited() {
		t.Fatal("the client saw the connection end while the target was alive")
	}
	if len(got) > 0 {
		t.Errorf("client received %q, want nothing", got)
	}
	if code, _ := tg.AwaitExit(bound); code != 137 {
		t.Errorf("target exited with code %d, want 137 (killed)", code)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "ok" {
		t.Errorf("marker = %q (%v), want the reply the target produced", b, err)
	}
	if e := next(t, observed); !e.Killed || !e.Dropped || e.Status != 200 || e.Err != "" {
		t.Errorf("observed %+v, want killed, dropped, the target's 200", e)
	}
}

// sinkFaults maps the lab's sink faults to arms of s for replica 0.
func sinkFaults(s *sink.Sink) func(string) (proxy.Route, error) {
	actions := map[string]sink.Action{
		"fail-effect":         {End: sink.Fail},
		"fail-after-effect":   {Apply: true, End: sink.Fail},
		"stall=1ms":           {Apply: true, After: time.Millisecond, End: sink.Answer},
		"crash-before-effect": {End: sink.Kill},
		"crash-after-effect":  {Apply: true, End: sink.Kill},
	}
	return func(fault string) (proxy.Route, error) {
		if fault == "" {
			return proxy.Route{}, nil
		}
		a, ok := actions[fault]
		if !ok {
			return proxy.Route{}, fmt.Errorf("unknown fault %q", fault)
		}
		return proxy.Route{Arm: func(body []byte) func() bool { return s.Arm(0, body, a) }}, nil
	}
}

// Ensure an arm placed through the proxy is taken by the sink when a real
// target process calls it with the same body, and is gone once the
// exchange ended: the next call with that body is normal.
func TestArmThroughTarget(t *testing.T) {
	tests := []struct {
		fault   string
		reply   string // the client's bytes, a prefix; "" for none
		applied int    // effects in the journal after the faulty call
		killed  bool
	}{
		{fault: "", reply: "HTTP/1.1 200 OK\r\n", applied: 1},
		{fault: "stall=1ms", reply: "HTTP/1.1 200 OK\r\n", applied: 1},
		{fault: "fail-effect", reply: "HTTP/1.1 502 Bad Gateway\r\n", applied: 0},
		{fault: "fail-after-effect", reply: "HTTP/1.1 502 Bad Gateway\r\n", applied: 1},
		{fault: "crash-before-effect", applied: 0, killed: true},
		{fault: "crash-after-effect", applied: 1, killed: true},
	}
	for _, tt := range tests {
		t.Run("fault="+tt.fault, func(t *testing.T) {
			// The sink's Kill needs the target, which needs the sink's
			// URL; the race detector cannot see through the sockets that
			// it is set before any call, so mu.
			var mu sync.Mutex
			var tg *serverproc.Server
			s, err := sink.Start(sink.Config{Replicas: 1, Kill: func(int) {
				mu.Lock()
				defer mu.Unlock()
				tg.Kill()
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			target := sinktest.StartTarget(t, sinktest.Options{EffectURL: s.URL(0)})
			mu.Lock()
			tg = target
			mu.Unlock()
			p, observed := startProxy(t, proxy.Config{Upstream: target.Addr, Route: sinkFaults(s)})

			got := string(send(t, p.Addr(), "POST /effect HTTP/1.1\r\nHost: p\r\nX-Lab-Fault: "+tt.fault+"\r\nContent-Length: 5\r\n\r\npay-1"))
			if !strings.HasPrefix(got, tt.reply) || tt.reply == "" && got != "" {
				t.Errorf("client received %q, want %q...", got, tt.reply)
			}
			if tt.reply == "HTTP/1.1 502 Bad Gateway\r\n" && !strings.HasSuffix(got, "sink 500: "+sink.FailBody+"\n") {
				t.Errorf("client received %q, want the sink's failure", got)
			}
			e := next(t, observed)
			if armed := tt.fault != ""; e.Fault != tt.fault || e.Killed || e.SinkArmed != armed || e.SinkFired != armed {
				t.Errorf("observed %+v, want the fault armed at the sink and fired: %v", e, armed)
			}
			if got := len(s.Journal()); got != tt.applied {
				t.Errorf("journal has %d entries, want %d", got, tt.applied)
			}
			if tt.killed {
				if _, err := target.AwaitExit(bound); err != nil {
					t.Fatal("target alive after the sink's kill")
				}
				return
			}
			// The arm is gone: the same body again is a normal call.
			got = string(send(t, p.Addr(), "POST /effect HTTP/1.1\r\nHost: p\r\nContent-Length: 5\r\n\r\npay-1"))
			if want := fmt.Sprintf("%d", tt.applied+1); !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(got, "\r\n\r\n"+want) {
				t.Errorf("the next call received %q, want 200 %s", got, want)
			}
			next(t, observed)
		})
	}
}

// Ensure an arm the target never took (the replica was unreachable) is
// disarmed once the exchange ended.
func TestDisarmWhenNotTaken(t *testing.T) {
	s, err := sink.Start(sink.Config{Replicas: 1, Kill: func(int) { t.Error("unexpected kill") }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, observed := startProxy(t, proxy.Config{Upstream: closedAddr(t), Route: sinkFaults(s)})
	if got := send(t, p.Addr(), "POST /effect HTTP/1.1\r\nHost: p\r\nX-Lab-Fault: fail-effect\r\nContent-Length: 5\r\n\r\npay-1"); len(got) > 0 {
		t.Fatalf("client received %q, want nothing", got)
	}
	if e := next(t, observed); !strings.HasPrefix(e.Err, "dial upstream") || !e.SinkArmed || e.SinkFired {
		t.Fatalf("observed %+v", e)
	}
	resp, err := http.Post(s.URL(0), "text/plain", strings.NewReader("pay-1"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "1" {
		t.Errorf("a call with the armed body = %d %q, want 200 1: the arm outlived its exchange", resp.StatusCode, b)
	}
}

// Ensure SetUpstream sends later exchanges to the new address.
func TestSetUpstream(t *testing.T) {
	a := httpTarget(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "A") })
	b := httpTarget(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "B") })
	p, observed := startProxy(t, proxy.Config{Upstream: a})
	for _, want := range []string{"A", "B"} {
		if want == "B" {
			p.SetUpstream(b)
		}
		got := string(send(t, p.Addr(), "GET / HTTP/1.1\r\nHost: p\r\n\r\n"))
		if !strings.HasSuffix(got, "\r\n\r\n"+want) {
			t.Errorf("received %q, want the reply of %s", got, want)
		}
		next(t, observed)
	}
}

// Ensure the proxy connects only to the loopback address it was told: an
// upstream on another address (a ready line naming 127.0.0.5) is refused
// by SetUpstream, and later exchanges go nowhere, neither there nor to the
// old address.
func TestSetUpstreamRefusesOtherHosts(t *testing.T) {
	reached := make(chan string, 2)
	old := httpTarget(t, func(w http.ResponseWriter, r *http.Request) { reached <- "old"; io.WriteString(w, "old") })
	ln, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Skipf("no 127.0.0.5 here: %v", err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached <- "other"; io.WriteString(w, "other") })}
	go other.Serve(ln)
	defer other.Close()
	p, observed := startProxy(t, proxy.Config{Upstream: old})
	err = p.SetUpstream(ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), `host "127.0.0.5" is not 127.0.0.1 or ::1`) {
		t.Errorf("SetUpstream(%s) = %v, want a refusal naming the host", ln.Addr(), err)
	}
	if got := send(t, p.Addr(), "GET / HTTP/1.1\r\nHost: p\r\n\r\n"); len(got) > 0 {
		t.Errorf("client received %q, want nothing", got)
	}
	if e := next(t, observed); !strings.Contains(e.Err, "is not 127.0.0.1 or ::1") || e.Status != 0 {
		t.Errorf("observed %+v, want no reply and the refusal", e)
	}
	select {
	case who := <-reached:
		t.Errorf("the %s upstream was reached", who)
	default:
	}
	if err := p.SetUpstream(old); err != nil {
		t.Fatal(err)
	}
	if got := string(send(t, p.Addr(), "GET / HTTP/1.1\r\nHost: p\r\n\r\n")); !strings.HasSuffix(got, "old") {
		t.Errorf("after SetUpstream back: received %q", got)
	}
	next(t, observed)
}

// Ensure Close ends open exchanges (the client gets nothing, the replica's
// connection is closed) and returns promptly; a second Close is harmless
// and nothing is accepted after.
func TestClose(t *testing.T) {
	arrived := make(chan struct{})
	upstreamClosed := make(chan struct{})
	addr := httpTarget(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // net/http watches the connection once the body was read
		close(arrived)
		select {
		case <-r.Context().Done():
			close(upstreamClosed)
		case <-time.After(bound):
		}
	})
	routes := func(string) (proxy.Route, error) { return proxy.Route{}, nil }
	var exchanges []proxy.Exchange
	var mu sync.Mutex
	p, err := proxy.Start(proxy.Config{Upstream: addr, Route: routes, Kill: func() {},
		Observe: func(e proxy.Exchange) { mu.Lock(); exchanges = append(exchanges, e); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() { got <- send(t, p.Addr(), "POST / HTTP/1.1\r\nHost: p\r\nContent-Length: 3\r\n\r\npay") }()
	<-arrived
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(bound):
		t.Fatalf("Close did not return within %v", bound)
	}
	if b := <-got; len(b) > 0 {
		t.Errorf("client received %q, want nothing", b)
	}
	select {
	case <-upstreamClosed:
	case <-time.After(bound):
		t.Fatal("the replica's connection stayed open after Close")
	}
	mu.Lock()
	if len(exchanges) != 1 || exchanges[0].Err != "proxy closed before the reply" {
		t.Errorf("observed %+v, want one exchange ended by Close", exchanges)
	}
	mu.Unlock()
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Error("a connection was accepted after Close")
	}
}

// Ensure Start names what is wrong with a config.
func TestStartRejects(t *testing.T) {
	route, kill := noFaults, func() {}
	tests := []struct {
		cfg  proxy.Config
		want string
	}{
		{proxy.Config{Upstream: "nowhere", Route: route, Kill: kill}, `upstream "nowhere": address nowhere: missing port in address`},
		{proxy.Config{Upstream: "127.0.0.5:80", Route: route, Kill: kill}, `upstream "127.0.0.5:80": host "127.0.0.5" is not 127.0.0.1 or ::1`},
		{proxy.Config{Upstream: "localhost:80", Route: route, Kill: kill}, `host "localhost" is not 127.0.0.1 or ::1`},
		{proxy.Config{Upstream: "10.0.0.1:80", Route: route, Kill: kill}, `host "10.0.0.1" is not 127.0.0.1 or ::1`},
		{proxy.Config{Upstream: "127.0.0.1:0", Route: route, Kill: kill}, `port "0" is not a number in 1..65535`},
		{proxy.Config{Upstream: "127.0.0.1:http", Route: route, Kill: kill}, `port "http" is not a number`},
		{proxy.Config{Upstream: "127.0.0.1:1", Kill: kill}, "no Route function"},
		{proxy.Config{Upstream: "127.0.0.1:1", Route: route}, "no Kill function"},
		{proxy.Config{Upstream: "127.0.0.1:1", Route: route, Kill: kill, MaxBody: -1}, "max body -1 out of range"},
		{proxy.Config{Upstream: "127.0.0.1:1", Route: route, Kill: kill, MaxBody: proxy.MaxMaxBody + 1}, "max body 67108865 out of range"},
	}
	for _, tt := range tests {
		p, err := proxy.Start(tt.cfg)
		if err == nil {
			p.Close()
			t.Errorf("Start(%+v) succeeded, want %q", tt.cfg, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Start = %v, want %q", err, tt.want)
		}
	}
}

// Ensure Settle waits for an exchange whose client gave up while the
// target still works, and that once it settled the exchange was observed:
// what a run reads of its exchanges then holds every call.
func TestSettle(t *testing.T) {
	release := make(chan struct{})
	up := httpTarget(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "late")
	})
	giveUp := func(string) (proxy.Route, error) { return proxy.Route{GiveUp: 30 * time.Millisecond}, nil }
	p, observed := startProxy(t, proxy.Config{Upstream: up, Route: giveUp})
	if _, err := http.Post("http://"+p.Addr()+"/", "text/plain", strings.NewReader("pay")); err == nil {
		t.Fatal("the client got a reply the target has not sent")
	}
	if p.Settle(20 * time.Millisecond) {
		t.Fatal("settled while the target's exchange runs")
	}
	close(release)
	if !p.Settle(bound) {
		t.Fatalf("not settled within %v of the target's reply", bound)
	}
	select {
	case e := <-observed:
		if e.Status != 200 {
			t.Errorf("observed %+v, want the target's 200", e)
		}
	default:
		t.Fatal("settled, and the exchange was not observed")
	}
}

// Ensure a client that leaves does not end an exchange whose fault is
// armed at the sink: a replica that calls the sink only after the
// client's timeout still meets the fault (the owner runs on, as behind a
// real client that gave up), and the exchange says the client left.
func TestClientLeavesArmedExchange(t *testing.T) {
	s, err := sink.Start(sink.Config{Replicas: 1, Kill: func(int) { t.Error("unexpected kill") }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	up := httpTarget(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		time.Sleep(150 * time.Millisecond) // slower than the client's patience
		resp, err := http.Post(s.URL(0), "text/plain", bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		v, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		w.Write(v)
	})
	p, observed := startProxy(t, proxy.Config{Upstream: up, Route: sinkFaults(s)})
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr()+"/", strings.NewReader("pay-1"))
	req.Header.Set("X-Lab-Fault", "stall=1ms")
	if _, err := (&http.Client{Timeout: 50 * time.Millisecond}).Do(req); err == nil {
		t.Fatal("the client got a reply before its timeout")
	}
	e := next(t, observed)
	if !e.SinkArmed || !e.SinkFired || e.Status != 200 || !strings.HasPrefix(e.Err, "client closed before the reply; the replica's exchange went on") {
		t.Errorf("observed %+v, want the fault fired after the client left, the replica's 200, and the client's leaving said", e)
	}
	if got := len(s.Journal()); got != 1 {
		t.Errorf("journal has %d entries, want 1", got)
	}
}

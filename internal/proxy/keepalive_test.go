package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"idemlab/internal/proxy"
)

// connCounter counts a net/http target's connections as they open and
// close.
type connCounter struct {
	mu             sync.Mutex
	opened, closed int
}

func (c *connCounter) state(_ net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s {
	case http.StateNew:
		c.opened++
	case http.StateClosed, http.StateHijacked:
		c.closed++
	}
}

func (c *connCounter) get() (opened, closed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened, c.closed
}

// waitFor polls cond until it holds, failing t after bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(bound); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited %v for %s", bound, what)
		}
	}
}

// Ensure the proxy keeps its connection to the replica alive between
// exchanges (one connection for calls one after another, each client on
// its own), closes it after an exchange whose reply was not relayed or
// that asked to close, and on Close.
func TestKeepAlive(t *testing.T) {
	var conns connCounter
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ConnState: conns.state, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, "1")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	routes := func(fault string) (proxy.Route, error) {
		if fault == "drop-reply" {
			return proxy.Route{DropReply: true}, nil
		}
		return noFaults(fault)
	}
	p, observed := startProxy(t, proxy.Config{Upstream: ln.Addr().String(), Route: routes})
	call := func(path, fault string) {
		t.Helper()
		req := "POST " + path + " HTTP/1.1\r\nHost: p\r\nConnection: close\r\nContent-Length: 3\r\n"
		if fault != "" {
			req += "X-Lab-Fault: " + fault + "\r\n"
		}
		got := string(send(t, p.Addr(), req+"\r\npay"))
		if want := fault == ""; strings.HasSuffix(got, "\r\n\r\n1") != want {
			t.Errorf("%s %s: client received %q", path, fault, got)
		}
		if e := next(t, observed); e.Status != 200 || e.Err != "" {
			t.Errorf("%s %s: observed %+v", path, fault, e)
		}
	}
	for range 3 {
		call("/effect", "")
	}
	if opened, closed := conns.get(); opened != 1 || closed != 0 {
		t.Errorf("three calls: the replica saw %d connections opened, %d closed; want 1 kept open", opened, closed)
	}
	call("/effect", "drop-reply") // on the kept connection, which it closes
	waitFor(t, "the dropped reply's connection to close", func() bool { _, closed := conns.get(); return closed == 1 })
	call("/close", "") // a new connection, closed as the reply asked
	waitFor(t, "the connection whose reply said close to close", func() bool { _, closed := conns.get(); return closed == 2 })
	call("/effect", "")
	if opened, closed := conns.get(); opened != 3 || closed != 2 {
		t.Errorf("the replica saw %d connections opened, %d closed; want 3 and 2", opened, closed)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Close to close the kept connection", func() bool { _, closed := conns.get(); return closed == 3 })
}

// Ensure a kept connection the replica closed while it was idle is not
// used: the next request goes on a new connection and is answered, and
// no request is sent twice.
func TestKeepAliveClosedByReplica(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	handled := make(chan struct{}, 2)
	addr := rawTarget(t, func(c net.Conn) {
		// One request per connection, answered as if the connection
		// stayed open, then closed: a replica's idle limit.
		r, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		requests++
		mu.Unlock()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1")
		c.Close()
		handled <- struct{}{}
	})
	p, observed := startProxy(t, proxy.Config{Upstream: addr})
	for i := range 2 {
		got := string(send(t, p.Addr(), "POST /effect HTTP/1.1\r\nHost: p\r\nContent-Length: 3\r\n\r\npay"))
		if !strings.HasSuffix(got, "\r\n\r\n1") {
			t.Errorf("call %d: client received %q", i, got)
		}
		if e := next(t, observed); e.Status != 200 || e.Err != "" {
			t.Errorf("call %d: observed %+v", i, e)
		}
		<-handled
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 2 {
		t.Errorf("the replica handled %d requests, want 2", requests)
	}
}

// Ensure a client reading its reply to the end of the connection gets
// the end right after the reply, not after the proxy's linger.
func TestReplyThenEnd(t *testing.T) {
	addr := httpTarget(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "1") })
	p, observed := startProxy(t, proxy.Config{Upstream: addr})
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second)) // the linger is 2 s
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: p\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil || !strings.HasSuffix(string(got), "\r\n\r\n1") {
		t.Errorf("client read %q, %v; want the reply, then the end", got, err)
	}
	conn.Close()
	next(t, observed)
}

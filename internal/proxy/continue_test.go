package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"idemlab/internal/proxy"
)

// ignoresExpect is a replica that never answers 100 Continue, as an
// HTTP/1.0 server does (RFC 9110 10.1.1 lets it): it reads the request
// head and then its whole body, sends what it read on got, and answers
// with the body's length, closing the connection.
func ignoresExpect(t *testing.T, got chan<- string) string {
	return rawTarget(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			got <- "read head: " + err.Error()
			return
		}
		b, err := io.ReadAll(req.Body)
		if err != nil {
			got <- "read body: " + err.Error()
			return
		}
		got <- string(b)
		fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%d", len(fmt.Sprint(len(b))), len(b))
	})
}

// Ensure a client's Expect: 100-continue does not stall an exchange with a
// replica that never says "go on": the proxy waits proxy.ContinueWait for
// it, then sends the body anyway, and the replica gets the whole body. It
// waited the whole ReplyTimeout (150 s) before: a probe saw the replica
// then apply an empty body.
func TestContinueNeverSent(t *testing.T) {
	t.Parallel() // waits out the proxy's wait for a 100 Continue
	got := make(chan string, 1)
	p, observed := startProxy(t, proxy.Config{Upstream: ignoresExpect(t, got)})
	body := strings.Repeat("x", 2048)
	if status, b := postExpecting(t, p.Addr(), body); status != 200 || b != "2048" {
		t.Errorf("reply %d %q, want 200 2048", status, b)
	}
	if s := receive(t, got, "the replica read nothing"); s != body {
		t.Errorf("the replica read %.40q (%d bytes), want the whole body (%d bytes)", s, len(s), len(body))
	}
	if e := next(t, observed); e.Status != 200 || e.Err != "" {
		t.Errorf("observed %+v, want status 200 and no error", e)
	}
}

// Ensure an HTTP/1.0 request's Expect: 100-continue is ignored, as RFC
// 9110 10.1.1 requires of a server: the client gets no 100 Continue (an
// HTTP/1.0 client cannot read one), and the replica gets the whole body
// and its reply is relayed as sent.
func TestContinueIgnoredForHTTP10(t *testing.T) {
	got := make(chan string, 1)
	p, observed := startProxy(t, proxy.Config{Upstream: ignoresExpect(t, got)})
	reply := string(send(t, p.Addr(), "POST /effect HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc"))
	if want := "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n3"; reply != want {
		t.Errorf("an HTTP/1.0 client got %q, want only the replica's reply %q", reply, want)
	}
	if s := receive(t, got, "the replica read nothing"); s != "abc" {
		t.Errorf("the replica read %q, want abc", s)
	}
	if e := next(t, observed); e.Status != 200 || e.Err != "" {
		t.Errorf("observed %+v, want status 200 and no error", e)
	}
}

// Ensure a replica that refuses a body (413) once it has begun to come,
// without a 100 Continue, and neither reads the rest nor closes, has its
// refusal relayed at once: the body sent after proxy.ContinueWait is cut
// short when the reply is whole, instead of the proxy blocking on a write
// the replica never reads (WriteTimeout, 30 s) with the reply already
// there.
func TestContinueRefusedWithoutReading(t *testing.T) {
	t.Parallel() // waits out the proxy's wait for a 100 Continue
	release := make(chan struct{})
	addr := rawTarget(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		if _, err := br.Peek(1); err != nil { // the body has begun to come
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 4\r\n\r\nbig!")
		<-release // holds the connection open, unread
	})
	t.Cleanup(func() { close(release) }) // before rawTarget's, which waits for the handler
	p, observed := startProxy(t, proxy.Config{Upstream: addr, MaxBody: 8 << 20})
	if status, b := postExpecting(t, p.Addr(), strings.Repeat("x", 8<<20)); status != 413 || b != "big!" {
		t.Errorf("reply %d %q, want the replica's 413 big!", status, b)
	}
	if e := next(t, observed); e.Status != 413 {
		t.Errorf("observed %+v, want status 413", e)
	}
}

// postExpecting posts body to the proxy at addr with Expect: 100-continue,
// as the lab's client does for a body over 1 KiB, and returns the reply.
func postExpecting(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true, ExpectContinueTimeout: bound}}
	req, err := http.NewRequest("POST", "http://"+addr+"/effect", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Expect", "100-continue")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST with Expect: 100-continue: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read reply: %v", err)
	}
	return resp.StatusCode, string(b)
}

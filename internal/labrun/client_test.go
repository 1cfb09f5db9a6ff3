package labrun

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"idemlab/internal/observation"
)

// listen starts a loopback listener whose connections serve handles; it is
// closed when the test ends.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().String()
}

// Ensure each way a call can fail lands in its stable outcome class, and a
// reply records status, body and the replayed header.
func TestClientOutcomes(t *testing.T) {
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	readRequest := func(c net.Conn) {
		_, _ = http.ReadRequest(bufio.NewReader(c))
	}
	tests := []struct {
		name     string
		addr     string
		want     string
		status   int
		replayed string
	}{
		{"refused", closed, observation.Refused, 0, ""},
		{"closed without reply", listen(t, func(c net.Conn) { readRequest(c); c.Close() }), observation.NoReply, 0, ""},
		{"no reply in time", listen(t, func(c net.Conn) { readRequest(c); time.Sleep(2 * time.Second); c.Close() }), observation.Timeout, 0, ""},
		{"reply", listen(t, func(c net.Conn) {
			readRequest(c)
			c.Write([]byte("HTTP/1.1 200 OK\r\nIdempotency-Replayed: true\r\nContent-Length: 1\r\nConnection: close\r\n\r\n7"))
			c.Close()
		}), observation.Reply, 200, "true"},
	}
	cl := newClient(200 * time.Millisecond)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "k"
			o, d := cl.do(context.Background(), "http://"+tt.addr+"/effect", request{key: &key, body: []byte("add-one")})
			if o.Outcome != tt.want {
				t.Fatalf("outcome = %s (error %q), want %s", o.Outcome, d.Error, tt.want)
			}
			if tt.want != observation.Reply {
				if o.Status != nil || o.Body != nil || o.Replayed != nil || d.Error == "" {
					t.Fatalf("failed call = %+v, %+v; want no status, body or replayed, and the error kept", o, d)
				}
				return
			}
			if *o.Status != tt.status || *o.Body != "7" || o.Replayed == nil || !*o.Replayed {
				t.Fatalf("reply = status %v body %v replayed %v", *o.Status, *o.Body, o.Replayed)
			}
		})
	}
}

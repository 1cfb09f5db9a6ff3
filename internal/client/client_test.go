package client

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"idemlab/internal/protocol"
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

// Ensure each way a call can fail is classified into its stable outcome,
// and a reply carries status, body and the replayed header.
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
		name   string
		addr   string
		want   protocol.Outcome
		status int
	}{
		{"refused", closed, protocol.OutcomeRefused, 0},
		{"closed without reply", listen(t, func(c net.Conn) { readRequest(c); c.Close() }), protocol.OutcomeNoReply, 0},
		{"no reply in time", listen(t, func(c net.Conn) { readRequest(c); time.Sleep(2 * time.Second); c.Close() }), protocol.OutcomeTimeout, 0},
		{"reply", listen(t, func(c net.Conn) {
			readRequest(c)
			c.Write([]byte("HTTP/1.1 200 OK\r\nIdempotency-Replayed: true\r\nContent-Length: 1\r\nConnection: close\r\n\r\n7"))
			c.Close()
		}), protocol.OutcomeReply, 200},
	}
	cl := New(200 * time.Millisecond)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "k"
			rep, err := cl.Post(context.Background(), EffectURL(tt.addr), Request{Key: &key, Body: []byte("add-one")})
			if tt.want != protocol.OutcomeReply {
				if err == nil {
					t.Fatalf("Post = %+v, want an error classified %s", rep, tt.want)
				}
				if got := Classify(err); got != tt.want {
					t.Fatalf("Classify(%v) = %s, want %s", err, got, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Post: %v", err)
			}
			if rep.Status != tt.status || string(rep.Body) != "7" || rep.Replayed == nil || !*rep.Replayed {
				t.Fatalf("reply = status %d body %q replayed %v, want 200 \"7\" true", rep.Status, rep.Body, rep.Replayed)
			}
		})
	}
}

// Ensure Retry-After is read as seconds or an HTTP date, and anything
// else asks for no wait.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
	}{
		{"", 0}, {"0", 0}, {"1", time.Second}, {"120", 2 * time.Minute}, {"-1", 0}, {"1.5", 0}, {"soon", 0},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := ParseRetryAfter(tt.v, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

package proxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// bareHop starts the least an HTTP-aware proxy hop can be, as a yardstick
// for BenchmarkProxyOverhead: one goroutine per client connection reads
// the request to the end of its Content-Length body, sends it without its
// Connection field on a connection to the replica kept from the last
// exchange, reads the reply the same way, writes it to the client and
// closes the client's connection. It watches nothing while the replica
// works, does not linger for a client still sending (the lab's proxy
// does, so that such a client is not reset before it read its reply),
// places no fault, bounds nothing and handles no other framing: it serves
// the benchmark's calls and nothing else, and is not a proxy to use.
func bareHop(tb testing.TB, upstream string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var (
		mu   sync.Mutex
		kept []net.Conn
		wg   sync.WaitGroup
	)
	tb.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range kept {
			c.Close()
		}
	})
	take := func() (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if n := len(kept); n > 0 {
			c := kept[n-1]
			kept = kept[:n-1]
			return c, nil
		}
		return net.Dial("tcp", upstream)
	}
	hop := func(client net.Conn) {
		defer client.Close()
		req, err := readMessage(bufio.NewReader(client), true)
		if err != nil {
			tb.Errorf("bare hop: read request: %v", err)
			return
		}
		up, err := take()
		if err != nil {
			tb.Errorf("bare hop: dial: %v", err)
			return
		}
		br := bufio.NewReader(up)
		if _, err := up.Write(req); err != nil {
			up.Close()
			tb.Errorf("bare hop: write request: %v", err)
			return
		}
		rep, err := readMessage(br, false)
		if err != nil {
			up.Close()
			tb.Errorf("bare hop: read reply: %v", err)
			return
		}
		mu.Lock()
		kept = append(kept, up)
		mu.Unlock()
		client.Write(rep)
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { hop(c) })
		}
	})
	return ln.Addr().String()
}

// readMessage reads one HTTP/1.1 message framed by its Content-Length (or
// with no body) from br and returns its bytes, less its Connection field
// when dropConnection is set.
func readMessage(br *bufio.Reader, dropConnection bool) ([]byte, error) {
	var msg bytes.Buffer
	tp := textproto.NewReader(br)
	length := 0
	for first := true; ; first = false {
		line, err := tp.ReadLine()
		if err != nil {
			return nil, err
		}
		name, value, _ := strings.Cut(line, ":")
		switch {
		case first:
		case line == "":
			msg.WriteString("\r\n")
			body := make([]byte, length)
			if _, err := io.ReadFull(br, body); err != nil {
				return nil, err
			}
			msg.Write(body)
			return msg.Bytes(), nil
		case strings.EqualFold(name, "Content-Length"):
			if length, err = strconv.Atoi(strings.TrimSpace(value)); err != nil {
				return nil, err
			}
		case dropConnection && strings.EqualFold(name, "Connection"):
			continue
		}
		msg.WriteString(line + "\r\n")
	}
}

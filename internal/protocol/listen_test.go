package protocol

import (
	"errors"
	"net"
	"testing"
	"time"
)

// within bounds every wait in these tests; reaching it is a failure, not a
// measurement.
const within = 20 * time.Second

// Ensure the listener never holds more than its slots open, that a
// connection closed twice frees its slot once, and that Close ends an
// Accept waiting for a slot.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const slots = 3
	ln := NewLimitListener(inner, slots)
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	for range slots + 2 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	var held []net.Conn
	for range slots {
		held = append(held, <-accepted)
	}
	select {
	case c := <-accepted:
		t.Fatalf("accepted %v beyond %d slots", c.RemoteAddr(), slots)
	case <-time.After(50 * time.Millisecond): // only the absence of a wrong accept; a slow machine passes too
	}
	held[0].Close()
	held[0].Close() // frees its slot once
	select {
	case c := <-accepted:
		held = append(held, c)
	case <-time.After(within):
		t.Fatal("no accept after a slot was freed")
	}
	select {
	case c := <-accepted:
		t.Fatalf("accepted %v beyond %d slots after a double Close", c.RemoteAddr(), slots)
	case <-time.After(50 * time.Millisecond):
	}
	ln.Close()
	select {
	case err := <-acceptErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(within):
		t.Fatal("Accept still waiting after Close")
	}
	for _, c := range held {
		c.Close()
	}
}

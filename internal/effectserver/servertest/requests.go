package servertest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
	"idemlab/internal/store/open"
)

// Stall sends on a raw connection a POST /effect promising 100 bytes of
// body and sending 5. With waitContinue it first awaits "100 Continue",
// sent when the handler starts reading: the request is surely in flight.
func Stall(t testing.TB, addr string, within time.Duration, waitContinue bool) net.Conn {
	t.Helper()
	return send(t, addr, within, "Content-Length: 100\r\n", waitContinue, "add-o")
}

// InFlight sends on a raw connection a POST /effect with key and fault,
// its body after "100 Continue": the request is surely in flight, held by
// its fault.
func InFlight(t testing.TB, addr string, within time.Duration, key, fault string) net.Conn {
	t.Helper()
	head := fmt.Sprintf("%s: %s\r\n%s: %s\r\nContent-Length: %d\r\n", protocol.KeyHeader, key, protocol.FaultHeader, fault, len(protocol.DefaultBody))
	return send(t, addr, within, head, true, protocol.DefaultBody)
}

// send sends POST /effect with the header lines head and body on a raw
// connection, closed when t ends.
func send(t testing.TB, addr string, within time.Duration, head string, waitContinue bool, body string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, within)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if waitContinue {
		head += "Expect: 100-continue\r\n"
	}
	if _, err := fmt.Fprintf(c, "POST /effect HTTP/1.1\r\nHost: %s\r\n%s\r\n", addr, head); err != nil {
		t.Fatal(err)
	}
	if waitContinue {
		c.SetReadDeadline(time.Now().Add(within))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
			t.Fatalf("waiting for 100 Continue: %q, %v", line, err)
		}
	}
	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	return c
}

// NoReply fails t unless c ends within without a byte.
func NoReply(t testing.TB, c net.Conn, within time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	if reply, err := io.ReadAll(c); err != nil || len(reply) != 0 {
		t.Errorf("cut request got %q, %v, want no reply", reply, err)
	}
}

// State returns the state the store kind left at place.
func State(t testing.TB, kind protocol.Store, place open.Place) store.State {
	t.Helper()
	st, err := open.ReadState(kind, place)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A Buffer collects output written by several goroutines at once.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package serverproc

import (
	"net"
	"strconv"
	"testing"
)

// Ensure FreePort returns a loopback port that is free again: a server
// told to listen on it can.
func TestFreePort(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if port < 1 || port > 65535 {
		t.Fatalf("FreePort() = %d, want a port in 1..65535", port)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen on the free port %d: %v", port, err)
	}
	ln.Close()
}

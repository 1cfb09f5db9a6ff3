package serverproc

import (
	"net"
	"os"
	"testing"
)

// Ensure the socket diagnostics find a listener of this process that a
// connection to 127.0.0.1 reaches, by its port, on IPv4 and on IPv6's
// dual stack, as the socket its fds hold; not on [::1] (a connection to
// 127.0.0.1 does not reach it).
func TestListeningInodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		network, addr string
		reached       bool
	}{
		{"tcp4", "127.0.0.1:0", true},
		{"tcp4", "0.0.0.0:0", true},
		{"tcp", "[::]:0", true},
		{"tcp6", "[::1]:0", false},
	} {
		ln, err := net.Listen(tc.network, tc.addr)
		if err != nil {
			t.Logf("%s: %v: not checked", tc.network, err) // a machine without IPv6
			continue
		}
		port := ln.Addr().(*net.TCPAddr).Port
		inodes := listeningInodes(port)
		if found := holds(os.Getpid(), inodes); found != tc.reached {
			t.Errorf("%s %s: listeningInodes(%d) = %v, want the socket this process holds: %v", tc.network, tc.addr, port, inodes, tc.reached)
		}
		ln.Close()
	}
}

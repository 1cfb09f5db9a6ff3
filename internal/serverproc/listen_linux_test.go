package serverproc

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
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

// Ensure a port's listener is told apart: the server's own, another
// process's (named), or none at all, which the probe does not take for
// the server either (a listener that answered and vanished was not it).
func TestListenerOf(t *testing.T) {
	t.Parallel()
	s := &Server{PID: os.Getpid(), mark: "no-such-mark"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if l := s.listenerOf(addr); !l.ours || !l.known {
		t.Errorf("listenerOf(%s), held by the server = %+v, want ours", addr, l)
	}
	other := &Server{PID: 1, mark: "no-such-mark"} // init holds no socket of this test's
	if l := other.listenerOf(addr); l.ours || !strings.HasPrefix(l.holder, fmt.Sprintf("pid %d ", os.Getpid())) {
		t.Errorf("listenerOf(%s), held by another process = %+v, want that process named", addr, l)
	}
	ln.Close()
	port, err := FreePort() // not a closed socket's: a child forked that moment may hold it still
	if err != nil {
		t.Fatal(err)
	}
	free := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if l := s.listenerOf(free); l.ours || l.holder != "" || !l.known {
		t.Errorf("listenerOf(%s), where none listens = %+v, want known: none", free, l)
	}
}

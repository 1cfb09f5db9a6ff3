package sinktest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// SinkAddr returns a loopback address no one listens on, for an attached
// target's sink_addr, below the kernel's ephemeral ports, where no other
// socket is handed a port of its own (docs/targets.md advises the same
// for sink_addr). A port of the ephemeral range, once freed, can become
// any connection's local end on the machine, and binding it again then
// fails with "address already in use" (caserun's TestAttachedSinkHeld did,
// once in about a dozen runs of the whole suite).
func SinkAddr(t testing.TB) string {
	t.Helper()
	low := 32768 // Linux's default ip_local_port_range starts here
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				low = n
			}
		}
	}
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(1024+rand.IntN(low-1024)))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr
		}
	}
	t.Fatalf("no free loopback port below %d in 100 tries", low)
	return ""
}

package sinktest

import (
	"net"
	"strconv"
	"testing"

	"idemlab/internal/serverproc"
)

// SinkAddr returns a loopback address no one listens on, for an attached
// target's sink_addr: a port serverproc.FreePort draws below the kernel's
// ephemeral ports, where no other socket is handed a port of its own
// (docs/targets.md advises the same for sink_addr). A port of the
// ephemeral range, once freed, can become any connection's local end on
// the machine, and binding it again then fails with "address already in
// use" (caserun's TestAttachedSinkHeld did, once in about a dozen runs of
// the whole suite).
func SinkAddr(t testing.TB) string {
	t.Helper()
	port, err := serverproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

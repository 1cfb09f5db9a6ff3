package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
	"idemlab/internal/store/open"
)

// stalledPost sends POST /effect with key and fault on a raw connection,
// asking for 100 Continue and sending the body once it comes: the handler
// is then reading the body, and its request is surely in flight. It
// returns the connection, closed when the test ends.
func stalledPost(t *testing.T, addr, key, fault string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, deadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := protocol.DefaultBody
	if _, err := fmt.Fprintf(c, "POST /effect HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\nX-Lab-Fault: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n",
		addr, key, fault, len(body)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(deadline))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("waiting for 100 Continue: %q, %v", line, err)
	}
	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	return c
}

// Ensure the shutdown grace holds on every store: SIGTERM during a request
// stalled for 60 s (stall=60000ms: its effect done, its result not
// recorded) exits 0 at the grace, not when the stall ends (a probe saw 59 s
// on durable, 29 s on postgres), and the cut stall is rolled back where the
// store has a transaction: the effect is not applied and the key not
// recorded, so a retry after a restart is the key's first effect. The
// volatile store has none: its effect was durable before the stall, and
// only the key is lost (as a restart loses every volatile key).
func TestShutdownCutsStall(t *testing.T) {
	tests := []struct {
		store   protocol.Store
		counter int64 // after the cut
	}{
		{protocol.Volatile, 1},
		{protocol.Durable, 0},
		{protocol.Postgres, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.store), func(t *testing.T) {
			t.Parallel()
			place := open.Place{Dir: t.TempDir()}
			args := []string{"-store", string(tt.store), "-faults"}
			if tt.store.InDatabase() {
				place.DSN = pgclustertest.Database(t)
				args = append(args, "-dsn", place.DSN)
			} else {
				args = append(args, "-state", place.Dir)
			}
			s := startServer(t, true, args...)
			c := stalledPost(t, s.addr, "k", "stall=60000ms")
			began := time.Now()
			if got := s.stop(); got != 0 {
				t.Fatalf("exit status after SIGTERM = %d, want 0; stderr:\n%s", got, s.stderr)
			}
			t.Logf("%s: exited %v after SIGTERM", tt.store, time.Since(began).Round(10*time.Millisecond))
			c.SetReadDeadline(time.Now().Add(deadline))
			if reply, err := io.ReadAll(c); err != nil || len(reply) != 0 {
				t.Errorf("stalled request got %q, %v, want no reply", reply, err)
			}
			<-s.copied
			if log := s.stderr.String(); !strings.Contains(log, "key=k") || !strings.Contains(log, "outcome=cut") {
				t.Errorf("log does not say the stalled request was cut:\n%s", log)
			}
			st, err := open.ReadState(tt.store, place)
			if err != nil {
				t.Fatal(err)
			}
			if st.Counter != tt.counter {
				t.Fatalf("counter after the cut = %d, want %d", st.Counter, tt.counter)
			}
			s2 := startServer(t, true, args...)
			want := fmt.Sprint(tt.counter + 1)
			if status, body, replayed := s2.post("k", ""); status != 200 || body != want || replayed != "false" {
				t.Errorf("retry after restart = %d %q replayed %q, want 200 %s false (the key not recorded)", status, body, replayed, want)
			}
			if got := s2.stop(); got != 0 {
				t.Fatalf("exit status after SIGTERM = %d, want 0", got)
			}
		})
	}
}

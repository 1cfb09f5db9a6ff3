package effectserver

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/protocol"
	"idemlab/internal/store/open"
)

// within bounds every wait in these tests; reaching it is a failure, not a
// measurement.
const within = 20 * time.Second

// running is a server started by run in this process.
type running struct {
	t      *testing.T
	addr   string
	log    *servertest.Buffer
	cancel context.CancelFunc
	done   chan error // run's result
}

// startRun runs a volatile server with lim (and -faults) until the test
// ends, and waits for its READY line.
func startRun(t *testing.T, lim limits) *running {
	t.Helper()
	return startRunWith(t, lim, nil)
}

// startRunWith is startRun with cfg edited by edit.
func startRunWith(t *testing.T, lim limits, edit func(*Config)) *running {
	t.Helper()
	cfg := Config{
		StateDir: t.TempDir(),
		Addr:     protocol.DefaultAddr,
		Store:    protocol.Volatile,
		Capacity: protocol.DefaultCapacity,
		MaxBody:  protocol.DefaultMaxBody,
		Wait:     protocol.DefaultWait,
		Faults:   true,
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, log: new(servertest.Buffer), cancel: cancel, done: make(chan error, 1)}
	pr, pw := io.Pipe()
	go func() {
		r.done <- run(ctx, cfg, pw, r.log, lim)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("no READY line: %v; log:\n%s", err, r.log)
	}
	go io.Copy(io.Discard, pr)
	r.addr = strings.TrimSuffix(strings.TrimPrefix(line, "READY "), "\n")
	t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels run's context and returns its result.
func (r *running) stop() error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for a later call
		return err
	case <-time.After(within):
		r.t.Fatalf("run still running %v after its context ended; log:\n%s", within, r.log)
		return nil
	}
}

// post sends POST /effect with key and fault; status 0 means no reply.
func (r *running) post(key, fault string) (status int, body, replayed string) {
	req, err := http.NewRequest(http.MethodPost, "http://"+r.addr+"/effect", strings.NewReader("add-one"))
	if err != nil {
		r.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(protocol.KeyHeader, key)
	}
	if fault != "" {
		req.Header.Set(protocol.FaultHeader, fault)
	}
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: within}
	res, err := cl.Do(req)
	if err != nil {
		return 0, "", ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header.Get(protocol.ReplayedHeader)
}

// Ensure a body that stalls is cut after the read timeout: the client gets
// 400 and the connection is closed.
func TestRunCutsStalledBody(t *testing.T) {
	t.Parallel()
	r := startRun(t, limits{read: 200 * time.Millisecond, conns: 8, grace: within})
	c := servertest.Stall(t, r.addr, within, true)
	c.SetReadDeadline(time.Now().Add(within))
	reply, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("stalled connection not closed within %v: %v", within, err)
	}
	if !strings.HasPrefix(string(reply), "HTTP/1.1 400 ") {
		t.Fatalf("reply to the stalled body = %q, want 400", reply)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// Ensure a connection that never sends its headers is cut as well.
func TestRunCutsStalledHeaders(t *testing.T) {
	t.Parallel()
	r := startRun(t, limits{read: 200 * time.Millisecond, conns: 8, grace: within})
	c, err := net.DialTimeout("tcp", r.addr, within)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /effect HTTP/1.1\r\nHost: x\r\n")
	c.SetReadDeadline(time.Now().Add(within))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("connection with stalled headers not closed within %v: %v", within, err)
	}
}

// Ensure the read deadline ends with the body: a duplicate waiting for its
// owner longer than the read timeout still gets the owner's result, not a
// canceled request. Both requests carry the delay, so whichever is
// admitted first holds the key for 2 s, and the other waits for it.
func TestRunWaitOutlivesReadTimeout(t *testing.T) {
	t.Parallel()
	r := startRun(t, limits{read: 100 * time.Millisecond, conns: 8, grace: within})
	type reply struct {
		status         int
		body, replayed string
	}
	replies := make([]reply, 2)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() {
			status, body, replayed := r.post("k", "delay=2000ms")
			replies[i] = reply{status, body, replayed}
		})
	}
	wg.Wait()
	fresh := 0
	for i, got := range replies {
		if got.status != 200 || got.body != "1" {
			t.Errorf("request %d = %+v, want 200 1; log:\n%s", i, got, r.log)
		}
		if got.replayed == "false" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d replies not replayed, want 1", fresh)
	}
}

// Ensure what the help says of a connection beyond the cap: it waits in
// the backlog, in arrival order, for the connections ahead of it, each
// staller holding its slot up to the read timeout, so that behind N
// stallers and C slots it is served only after at least N-C+1 of them were
// cut (their 400s are logged before its 200): N/C read timeouts, not one
// (the help used to promise "at the latest requestReadTimeout after the
// oldest staller was accepted"; 500 stallers made a client wait 7.55 s).
func TestRunConnectionCap(t *testing.T) {
	t.Parallel()
	const slots, stallers = 2, 6
	r := startRun(t, limits{read: 300 * time.Millisecond, conns: slots, grace: within})
	for range stallers {
		servertest.Stall(t, r.addr, within, false)
	}
	if status, body, _ := r.post("", ""); status != 200 || body != "1" {
		t.Fatalf("POST behind the stallers = %d %q, want 200 1; log:\n%s", status, body, r.log)
	}
	log := r.log.String()
	served := strings.Index(log, "status=200")
	if served < 0 {
		t.Fatalf("log has no 200:\n%s", log)
	}
	if cut := strings.Count(log[:served], "status=400"); cut < stallers-slots+1 {
		t.Fatalf("served after %d stallers were cut, want at least %d:\n%s", cut, stallers-slots+1, log)
	}
}

// Ensure a shutdown with a request still in flight after the grace period
// closes it and still returns nil (the command exits 0).
func TestRunShutdownAfterGrace(t *testing.T) {
	t.Parallel()
	r := startRun(t, limits{read: within, conns: 8, grace: 100 * time.Millisecond})
	c := servertest.Stall(t, r.addr, within, true) // in flight, and stays so for the read timeout
	if err := r.stop(); err != nil {
		t.Fatalf("run after the grace period = %v, want nil", err)
	}
	c.SetReadDeadline(time.Now().Add(within))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("stalled connection not closed at shutdown: %v", err)
	}
	if log := r.log.String(); !strings.Contains(log, "closed the connections still open") || !strings.Contains(log, "msg=stopped") {
		t.Fatalf("log lacks the forced close and the stop:\n%s", log)
	}
}

// Ensure the end of the shutdown grace cuts a fault's sleep on every
// store, so that run returns instead of sleeping it out: a cut delay
// applies nothing; a cut stall is rolled back by a store with a
// transaction (durable, postgres), and the volatile store keeps the effect
// it made durable before the stall. Either way the key is not recorded.
func TestRunCutsFaultSleeps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		store   protocol.Store
		fault   string
		counter int64
	}{
		{protocol.Volatile, "delay=60000ms", 0},
		{protocol.Volatile, "stall=60000ms", 1},
		{protocol.Durable, "delay=60000ms", 0},
		{protocol.Durable, "stall=60000ms", 0},
		{protocol.Postgres, "delay=60000ms", 0},
		{protocol.Postgres, "stall=60000ms", 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.store)+" "+tt.fault, func(t *testing.T) {
			dir := t.TempDir()
			p := place(t, tt.store, dir)
			r := startRunWith(t, limits{read: within, conns: 8, grace: 200 * time.Millisecond}, func(c *Config) {
				c.Store, c.StateDir, c.DSN = tt.store, dir, p.DSN
				if tt.store.InDatabase() {
					c.StateDir = ""
				}
			})
			c := servertest.InFlight(t, r.addr, within, "k", tt.fault)
			if tt.counter > 0 {
				// The volatile effect is durable before the stall: once it
				// shows, the request is in the stall (else, on a slow
				// machine, the grace could end before the effect begins).
				waitFor(t, func() bool { st, err := open.ReadState(tt.store, p); return err == nil && st.Counter == tt.counter })
			}
			if err := r.stop(); err != nil {
				t.Fatalf("run = %v, want nil", err)
			}
			servertest.NoReply(t, c, within)
			if log := r.log.String(); !strings.Contains(log, "outcome=cut") || strings.Contains(log, "still running after the cut") {
				t.Errorf("log does not say the request was cut and ended:\n%s", log)
			}
			if got := servertest.State(t, tt.store, p).Counter; got != tt.counter {
				t.Errorf("counter after the cut = %d, want %d", got, tt.counter)
			}
			if tt.store == protocol.Volatile {
				return // its keys live in memory only
			}
			s, err := open.Store(tt.store, p, protocol.DefaultCapacity, protocol.DefaultWait)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if rec, err := s.Recorded(); err != nil || len(rec) != 0 {
				t.Errorf("recorded keys after the cut = %v, %v, want none", rec, err)
			}
		})
	}
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %v", within)
		}
	}
}

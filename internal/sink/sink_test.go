package sink_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"idemlab/internal/serverproc"
	"idemlab/internal/sink"
	"idemlab/internal/sink/sinktest"
)

// The test binary doubles as a target process (package sinktest).
func TestMain(m *testing.M) { os.Exit(sinktest.Main(m)) }

// bound fails a hung test: nothing here should come near it.
const bound = 30 * time.Second

// start starts a sink closed when t ends; a nil cfg.Kill fails t if called.
func start(t *testing.T, cfg sink.Config) *sink.Sink {
	t.Helper()
	if cfg.Kill == nil {
		cfg.Kill = func(r int) { t.Errorf("unexpected kill of replica %d", r) }
	}
	s, err := sink.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// root returns the sink's http://127.0.0.1:PORT.
func root(s *sink.Sink) string { return strings.TrimSuffix(s.URL(0), "/effect/0") }

type call struct {
	method, path string
	header       http.Header
	body         string
	raw          string // sent as is over a fresh connection instead, when set
}

type reply struct {
	status int
	body   string
	header http.Header
	err    error
}

// client dials a connection for each call: with connections kept, a
// burst of calls leaves connections dialed and never used, and the sink's
// Close (http.Server.Shutdown) holds such a connection for 5 s.
var client = &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true}}

func do(base string, c call) reply {
	if c.raw != "" {
		return doRaw(strings.TrimPrefix(base, "http://"), c.raw)
	}
	method := c.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		return reply{err: err}
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), header: resp.Header, err: err}
}

// doRaw sends raw and reads the reply's head and as much of its body as
// arrives before the connection ends.
func doRaw(addr, raw string) reply {
	conn, err := net.DialTimeout("tcp", addr, bound)
	if err != nil {
		return reply{err: err}
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(bound))
	if _, err := io.WriteString(conn, raw); err != nil {
		return reply{err: err}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return reply{err: err}
	}
	b, _ := io.ReadAll(resp.Body) // a refused head is followed by a reset
	return reply{status: resp.StatusCode, body: string(b), header: resp.Header}
}

// headOf returns a call to /effect/0 with body "a" whose head (request
// line, header fields, empty line) is exactly n bytes.
func headOf(n int) string {
	prefix := "POST /effect/0 HTTP/1.1\r\nHost: sink\r\nConnection: close\r\nContent-Length: 1\r\nX-Pad: "
	return prefix + strings.Repeat("p", n-len(prefix)-len("\r\n\r\n")) + "\r\n\r\na"
}

func sum(body string) string {
	s := sha256.Sum256([]byte(body))
	return hex.EncodeToString(s[:])
}

func key(k string) *string { return &k }

type entry struct {
	replica int
	body    string
	key     *string
	replays int64 // the effect it replays; 0: an effect applied
}

// checkJournal compares the journal with want, in order, and checks that
// the effects applied are numbered 1, 2, ..., each replay numbered as the
// effect it replays, and that its times do not go back.
func checkJournal(t *testing.T, got []sink.Entry, want []entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("journal has %d entries, want %d: %+v", len(got), len(want), got)
	}
	applied := int64(0)
	for i, e := range got {
		w := want[i]
		seq := w.replays
		if seq == 0 {
			applied++
			seq = applied
		}
		if e.Seq != seq || e.Replayed != (w.replays > 0) || e.Replica != w.replica || e.BodySHA256 != sum(w.body) {
			t.Errorf("journal[%d] = seq %d replayed %v replica %d body %s, want seq %d replayed %v replica %d body %q",
				i, e.Seq, e.Replayed, e.Replica, e.BodySHA256, seq, w.replays > 0, w.replica, w.body)
		}
		if (e.Key == nil) != (w.key == nil) || (e.Key != nil && *e.Key != *w.key) {
			t.Errorf("journal[%d].Key = %v, want %v", i, deref(e.Key), deref(w.key))
		}
		if e.At.IsZero() || (i > 0 && e.At.Before(got[i-1].At)) {
			t.Errorf("journal[%d].At = %v after %v", i, e.At, got[max(i-1, 0)].At)
		}
		if e.Received.IsZero() || e.Applied.Before(e.Received) {
			t.Errorf("journal[%d] received %v, applied %v: want received first", i, e.Received, e.Applied)
		}
	}
}

func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", *p)
}

type armSpec struct {
	replica  int
	body     string
	action   sink.Action
	disarmed bool // disarm before any call
}

type step struct {
	call
	status int
	body   string // "" with status 0: don't check
}

// Ensure the sink's contract: one effect per accepted call, its value the
// journal's next sequence number; a forwarded key honoured as a payment
// provider does (the same key and body replayed from any replica, another
// body refused with 422, an empty key or none deduplicating nothing); armed
// actions taken in arm order by equal bodies from their replica only; and
// every refused call (405, 404, 413, 431, 422) applies nothing.
func TestContract(t *testing.T) {
	post := func(path, body string, h ...string) call {
		c := call{path: path, body: body, header: http.Header{}}
		for i := 0; i+1 < len(h); i += 2 {
			c.header[h[i]] = append(c.header[h[i]], h[i+1])
		}
		return c
	}
	answer := sink.Normal
	fail := sink.Action{End: sink.Fail}
	failAfter := sink.Action{Apply: true, End: sink.Fail}
	tests := []struct {
		name    string
		cfg     sink.Config
		arms    []armSpec
		steps   []step
		journal []entry
	}{{
		name:    "one call applies one effect valued 1",
		cfg:     sink.Config{Replicas: 1},
		steps:   []step{{post("/effect/0", "a"), 200, "1"}},
		journal: []entry{{0, "a", nil, 0}},
	}, {
		name: "values count up across replicas with no gap",
		cfg:  sink.Config{Replicas: 3},
		steps: []step{
			{post("/effect/0", "a"), 200, "1"},
			{post("/effect/2", "b"), 200, "2"},
			{post("/effect/0", "a"), 200, "3"},
			{post("/effect/1", ""), 200, "4"},
		},
		journal: []entry{{0, "a", nil, 0}, {2, "b", nil, 0}, {0, "a", nil, 0}, {1, "", nil, 0}},
	}, {
		name: "a forwarded key with the same body replays its effect, from any replica",
		cfg:  sink.Config{Replicas: 2},
		steps: []step{
			{post("/effect/0", "a", "Idempotency-Key", "k-1"), 200, "1"},
			{post("/effect/0", "a", "Idempotency-Key", "k-1"), 200, "1"},
			{post("/effect/1", "a", "Idempotency-Key", "k-1"), 200, "1"},
			{post("/effect/1", "a", "Idempotency-Key", "k-2"), 200, "2"},
			{post("/effect/0", "a"), 200, "3"},
		},
		journal: []entry{{0, "a", key("k-1"), 0}, {0, "a", key("k-1"), 1}, {1, "a", key("k-1"), 1}, {1, "a", key("k-2"), 0}, {0, "a", nil, 0}},
	}, {
		name: "another body under a forwarded key is refused with 422 and applies nothing",
		cfg:  sink.Config{Replicas: 1},
		steps: []step{
			{post("/effect/0", "a", "Idempotency-Key", "k-1"), 200, "1"},
			{post("/effect/0", "b", "Idempotency-Key", "k-1"), 422, sink.ReusedBody},
			{post("/effect/0", "b", "Idempotency-Key", "k-2"), 200, "2"},
			{post("/effect/0", "a", "Idempotency-Key", "k-1"), 200, "1"},
		},
		journal: []entry{{0, "a", key("k-1"), 0}, {0, "b", key("k-2"), 0}, {0, "a", key("k-1"), 1}},
	}, {
		name: "an empty key deduplicates nothing; several key lines are one key",
		cfg:  sink.Config{Replicas: 1},
		steps: []step{
			{post("/effect/0", "a", "Idempotency-Key", ""), 200, "1"},
			{post("/effect/0", "a", "Idempotency-Key", ""), 200, "2"},
			{post("/effect/0", "a", "Idempotency-Key", `"odd" k`, "Idempotency-Key", "second"), 200, "3"},
			{post("/effect/0", "a", "Idempotency-Key", `"odd" k, second`), 200, "3"},
			{post("/effect/0", "a", "Idempotency-Key", `"odd" k`), 200, "4"},
		},
		journal: []entry{{0, "a", key(""), 0}, {0, "a", key(""), 0}, {0, "a", key(`"odd" k, second`), 0},
			{0, "a", key(`"odd" k, second`), 3}, {0, "a", key(`"odd" k`), 0}},
	}, {
		name: "a key whose effect failed before applying is free; one applied then failed replays",
		cfg:  sink.Config{Replicas: 1},
		arms: []armSpec{{0, "a", fail, false}, {0, "b", failAfter, false}},
		steps: []step{
			{post("/effect/0", "a", "Idempotency-Key", "k-a"), 500, sink.FailBody},
			{post("/effect/0", "a", "Idempotency-Key", "k-a"), 200, "1"},
			{post("/effect/0", "b", "Idempotency-Key", "k-b"), 500, sink.FailBody},
			{post("/effect/0", "b", "Idempotency-Key", "k-b"), 200, "2"},
		},
		journal: []entry{{0, "a", key("k-a"), 0}, {0, "b", key("k-b"), 0}, {0, "b", key("k-b"), 2}},
	}, {
		name: "the key is read from the configured header only",
		cfg:  sink.Config{Replicas: 1, KeyHeader: "x-pay-key"},
		steps: []step{
			{post("/effect/0", "a", "X-Pay-Key", "p", "Idempotency-Key", "ignored"), 200, "1"},
			{post("/effect/0", "a", "Idempotency-Key", "ignored"), 200, "2"},
		},
		journal: []entry{{0, "a", key("p"), 0}, {0, "a", nil, 0}},
	}, {
		name: "another method is 405 and applies nothing",
		cfg:  sink.Config{Replicas: 1},
		steps: []step{
			{call{method: "GET", path: "/effect/0"}, 405, "method not allowed: POST only\n"},
			{call{method: "PUT", path: "/effect/0", body: "a"}, 405, ""},
			{call{method: "DELETE", path: "/effect/0"}, 405, ""},
		},
	}, {
		name: "another path or an unknown replica is 404 and applies nothing",
		cfg:  sink.Config{Replicas: 2},
		steps: []step{
			{post("/effect", "a"), 404, "no such effect endpoint\n"},
			{post("/effect/", "a"), 404, ""},
			{post("/effect/2", "a"), 404, ""},
			{post("/effect/00", "a"), 404, ""},
			{post("/effect/+1", "a"), 404, ""},
			{post("/effect/-1", "a"), 404, ""},
			{post("/effect/0/x", "a"), 404, ""},
			{post("/effect/1x", "a"), 404, ""},
			{post("/other", "a"), 404, ""},
			{call{method: "GET", path: "/"}, 404, ""},
		},
	}, {
		name: "a body over MaxBody is 413 and applies nothing, armed or not; one at MaxBody applies",
		cfg:  sink.Config{Replicas: 1, MaxBody: 8},
		arms: []armSpec{{0, "123456789", fail, false}},
		steps: []step{
			{post("/effect/0", "123456789"), 413, "body over 8 bytes\n"},
			{post("/effect/0", "123456789"), 413, "body over 8 bytes\n"},
			{post("/effect/0", "12345678"), 200, "1"},
		},
		journal: []entry{{0, "12345678", nil, 0}},
	}, {
		name: "a head over HeaderBytes is 431 and applies nothing; one of HeaderBytes applies",
		cfg:  sink.Config{Replicas: 1},
		steps: []step{
			{call{raw: headOf(sink.HeaderBytes + 1)}, 431, ""},
			{call{raw: headOf(sink.HeaderBytes)}, 200, "1"},
		},
		journal: []entry{{0, "a", nil, 0}},
	}, {
		name: "fail answers 500 with the fixed body and applies nothing",
		cfg:  sink.Config{Replicas: 1},
		arms: []armSpec{{0, "a", fail, false}},
		steps: []step{
			{post("/effect/0", "a"), 500, sink.FailBody},
			{post("/effect/0", "a"), 200, "1"},
		},
		journal: []entry{{0, "a", nil, 0}},
	}, {
		name:    "fail after applying answers 500 and keeps the effect",
		cfg:     sink.Config{Replicas: 1},
		arms:    []armSpec{{0, "a", failAfter, false}},
		steps:   []step{{post("/effect/0", "a"), 500, sink.FailBody}},
		journal: []entry{{0, "a", nil, 0}},
	}, {
		name: "arms of equal bodies are taken in arm order",
		cfg:  sink.Config{Replicas: 1},
		arms: []armSpec{{0, "a", fail, false}, {0, "a", failAfter, false}, {0, "a", answer, false}},
		steps: []step{
			{post("/effect/0", "a"), 500, sink.FailBody},
			{post("/effect/0", "a"), 500, sink.FailBody},
			{post("/effect/0", "a"), 200, "2"},
			{post("/effect/0", "a"), 200, "3"},
		},
		journal: []entry{{0, "a", nil, 0}, {0, "a", nil, 0}, {0, "a", nil, 0}},
	}, {
		name: "an arm is taken only by an equal body from its replica",
		cfg:  sink.Config{Replicas: 2},
		arms: []armSpec{{1, "a", fail, false}},
		steps: []step{
			{post("/effect/0", "a"), 200, "1"},
			{post("/effect/1", "ab"), 200, "2"},
			{post("/effect/1", ""), 200, "3"},
			{post("/effect/1", "a"), 500, sink.FailBody},
		},
		journal: []entry{{0, "a", nil, 0}, {1, "ab", nil, 0}, {1, "", nil, 0}},
	}, {
		name: "a disarmed arm is not taken; the next one is",
		cfg:  sink.Config{Replicas: 1},
		arms: []armSpec{{0, "a", fail, true}, {0, "a", failAfter, false}},
		steps: []step{
			{post("/effect/0", "a"), 500, sink.FailBody},
			{post("/effect/0", "a"), 200, "2"},
		},
		journal: []entry{{0, "a", nil, 0}, {0, "a", nil, 0}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, tt.cfg)
			var disarms []func() bool
			for _, a := range tt.arms {
				d := s.Arm(a.replica, []byte(a.body), a.action)
				if a.disarmed && d() {
					t.Errorf("an arm disarmed before any call reports that it fired")
				}
				disarms = append(disarms, d)
			}
			for i, st := range tt.steps {
				r := do(root(s), st.call)
				if r.err != nil {
					t.Fatalf("step %d: %v", i, r.err)
				}
				if r.status != st.status || (st.body != "" && r.body != st.body) {
					t.Errorf("step %d: %s %s = %d %q, want %d %q", i, st.method, st.path, r.status, r.body, st.status, st.body)
				}
				if r.status != 431 {
					if got := r.header.Get("Content-Type"); got != "text/plain" {
						t.Errorf("step %d: Content-Type = %q, want text/plain", i, got)
					}
				}
				if r.status == 405 {
					if got := r.header.Get("Allow"); got != "POST" {
						t.Errorf("step %d: Allow = %q, want POST", i, got)
					}
				}
			}
			checkJournal(t, s.Journal(), tt.journal)
			for i, d := range disarms {
				// After the arm was taken (or twice): harmless, and it
				// says the same each time.
				if first, again := d(), d(); first != again || first && tt.arms[i].disarmed {
					t.Errorf("arm %d: disarm reports fired %v, then %v (disarmed first: %v)", i, first, again, tt.arms[i].disarmed)
				}
			}
		})
	}
}

// Ensure each End acts on a real target process that calls the sink: an
// answer reaches the target's client, a failure reaches it as the target's
// own error, and a kill journals first (when it applies), kills the calling
// replica, and leaves its client without a reply.
func TestEnds(t *testing.T) {
	tests := []struct {
		name        string
		action      sink.Action
		status      int    // the target's reply; 0: none
		body        string // the target's reply body; with status 502 and "", its prefix "sink: " (a transport error)
		applied     bool   // the journal holds the effect
		killed      bool
		atKill      int // journal entries when Kill ran
		observedSeq int64
	}{
		{name: "answer", action: sink.Action{Apply: true, End: sink.Answer}, status: 200, body: "1", applied: true, observedSeq: 1},
		{name: "answer after a stall", action: sink.Action{Before: time.Millisecond, Apply: true, After: time.Millisecond, End: sink.Answer}, status: 200, body: "1", applied: true, observedSeq: 1},
		{name: "fail-effect", action: sink.Action{End: sink.Fail}, status: 502, body: "sink 500: " + sink.FailBody + "\n"},
		{name: "fail-after-effect", action: sink.Action{Apply: true, End: sink.Fail}, status: 502, body: "sink 500: " + sink.FailBody + "\n", applied: true, observedSeq: 1},
		{name: "crash-before-effect", action: sink.Action{End: sink.Kill}, killed: true, atKill: 0},
		{name: "crash-after-effect", action: sink.Action{Apply: true, End: sink.Kill}, applied: true, killed: true, atKill: 1, observedSeq: 1},
		{name: "stall then crash-after-effect", action: sink.Action{Apply: true, After: time.Millisecond, End: sink.Kill}, applied: true, killed: true, atKill: 1, observedSeq: 1},
		{name: "drop-downstream-reply", action: sink.Action{Apply: true, End: sink.Drop}, status: 502, applied: true, observedSeq: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The sink and the target are set before any call; the race
			// detector cannot see that through the sockets, so mu.
			var (
				mu     sync.Mutex
				s      *sink.Sink
				tg     *serverproc.Server
				atKill = -1
				calls  = make(chan sink.Call, 4)
			)
			started := start(t, sink.Config{
				Replicas: 1,
				Kill: func(r int) {
					mu.Lock()
					defer mu.Unlock()
					atKill = len(s.Journal())
					if r != 0 {
						t.Errorf("kill of replica %d, want 0", r)
					}
					tg.Kill()
				},
				Observe: func(c sink.Call) { calls <- c },
			})
			target := sinktest.StartTarget(t, sinktest.Options{Service: sinktest.Service{ForwardKey: true}, EffectURL: started.URL(0)})
			mu.Lock()
			s, tg = started, target
			mu.Unlock()
			disarm := started.Arm(0, []byte("pay"), tt.action)
			defer disarm()

			r := do("http://"+target.Addr, call{path: "/effect", body: "pay", header: http.Header{"Idempotency-Key": {"k"}}})
			if tt.status == 0 {
				if r.err == nil {
					t.Fatalf("target answered %d %q, want no reply", r.status, r.body)
				}
				if ne, ok := errors.AsType[net.Error](r.err); ok && ne.Timeout() {
					t.Fatalf("target: %v, want the connection closed", r.err)
				}
			} else if r.err != nil || r.status != tt.status || r.body != tt.body && (tt.body != "" || !strings.HasPrefix(r.body, "sink: ")) {
				t.Fatalf("target = %d %q (%v), want %d %q", r.status, r.body, r.err, tt.status, tt.body)
			}
			var want []entry
			if tt.applied {
				want = []entry{{0, "pay", key("k"), 0}}
			}
			checkJournal(t, started.Journal(), want)

			// The client sees EOF when the kernel closes the target's
			// sockets, which may be before the sink's Kill has reaped it.
			if tt.killed {
				code, err := target.AwaitExit(bound)
				if err != nil {
					t.Fatalf("target alive %v after a kill", bound)
				}
				if code != 137 {
					t.Errorf("target exited with code %d, want 137 (killed)", code)
				}
			} else if target.Exited() {
				t.Fatalf("target exited: %q", target.Log())
			}
			mu.Lock()
			if got := atKill; tt.killed && got != tt.atKill {
				t.Errorf("journal held %d entries when Kill ran, want %d", got, tt.atKill)
			}
			mu.Unlock()

			c := <-calls
			if !c.Armed || c.Action != tt.action || c.Killed != tt.killed || c.Seq != tt.observedSeq || c.Err != "" {
				t.Errorf("observed %+v, want armed %+v, killed %v, seq %d", c, tt.action, tt.killed, tt.observedSeq)
			}
			if want := tt.status; want == 502 && tt.body != "" && c.Status != 500 || want == 200 && c.Status != 200 || (want == 0 || tt.body == "") && c.Status != 0 {
				t.Errorf("observed status %d for a target reply of %d", c.Status, want)
			}
		})
	}
}

// Ensure a kill is not run for a caller that went away during the wait
// (it may have been restarted since), while its effect stays applied.
func TestKillSkippedWhenCallerGone(t *testing.T) {
	calls := make(chan sink.Call, 1)
	s := start(t, sink.Config{Replicas: 1, Observe: func(c sink.Call) { calls <- c }})
	// The caller is gone long before the 2 s wait ends.
	defer s.Arm(0, []byte("pay"), sink.Action{Apply: true, After: 2 * time.Second, End: sink.Kill})()
	conn, err := net.Dial("tcp", strings.TrimPrefix(root(s), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /effect/0 HTTP/1.1\r\nHost: sink\r\nContent-Length: 3\r\n\r\npay")
	conn.Close()
	c := <-calls
	if c.Killed || c.Seq != 1 || c.Status != 0 || c.Err != "caller gone before the kill" {
		t.Errorf("observed %+v, want seq 1, no kill, no reply, the caller gone", c)
	}
	checkJournal(t, s.Journal(), []entry{{0, "pay", nil, 0}})
}

// Ensure Close closes a connection that never sent a request at once,
// where http.Server.Shutdown would wait 5 s for it as if it were busy (a
// target's HTTP client may dial before it has a call to make): Close
// returns and the connection reads EOF well before then. The 4 s is a
// hang detector for that 5 s wait, far above the milliseconds it takes.
func TestCloseEndsUnusedConnection(t *testing.T) {
	s, err := sink.Start(sink.Config{Replicas: 1, Kill: func(int) {}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(root(s), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A call on another connection: the unused one is accepted by then.
	if r := do(root(s), call{path: "/effect/0", body: "x"}); r.status != http.StatusOK {
		t.Fatalf("a call: status %d, want 200", r.status)
	}
	began := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took >= 4*time.Second {
		t.Errorf("Close took %v with a connection that sent nothing: it waited for it", took)
	}
	conn.SetReadDeadline(time.Now().Add(bound))
	if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the unused connection read %d bytes, %v after Close; want EOF", n, err)
	}
}

// Ensure the waits sequence duplicates: while one call waits before its
// effect, a duplicate applies first; while one waits after its effect, the
// effect is journaled and a duplicate gets the next value. Close ends both
// waits promptly (the stalled call gets 503, nothing more is applied), and
// a second Close is harmless.
func TestStallsAndClose(t *testing.T) {
	tests := []struct {
		name        string
		action      sink.Action
		waitJournal int    // entries the first call journals before the duplicate is sent
		prompt      string // the value the duplicate gets while the first waits
	}{
		{name: "before", action: sink.Action{Before: sink.MaxWait, Apply: true, End: sink.Answer}, waitJournal: 0, prompt: "1"},
		{name: "after", action: sink.Action{Apply: true, After: sink.MaxWait, End: sink.Answer}, waitJournal: 1, prompt: "2"},
		{name: "after, then kill", action: sink.Action{Apply: true, After: sink.MaxWait, End: sink.Kill}, waitJournal: 1, prompt: "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := make(chan sink.Call, 2)
			s, err := sink.Start(sink.Config{Replicas: 1,
				Kill:    func(r int) { t.Errorf("kill of replica %d: Close should have ended the wait", r) },
				Observe: func(c sink.Call) { calls <- c }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.Arm(0, []byte("dup"), tt.action)
			replies := make(chan reply, 2)
			send := func() { replies <- do(root(s), call{path: "/effect/0", body: "dup"}) }
			go send()
			awaitJournal(t, s, tt.waitJournal)
			go send()

			r := <-replies // the call that did not take the arm
			if r.err != nil || r.status != 200 || r.body != tt.prompt {
				t.Fatalf("duplicate = %d %q (%v), want 200 %q", r.status, r.body, r.err, tt.prompt)
			}
			if c := <-calls; c.Armed {
				t.Fatalf("the call answered first took the arm: %+v", c)
			}
			select {
			case r := <-replies:
				t.Fatalf("the waiting call answered %d %q before its %v wait or Close", r.status, r.body, sink.MaxWait)
			default:
			}
			if got := len(s.Journal()); got != tt.waitJournal+1 {
				t.Fatalf("journal has %d entries while the first waits, want %d", got, tt.waitJournal+1)
			}

			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(bound): // well short of the wait
				t.Fatalf("Close did not return within %v of a %v wait", bound, sink.MaxWait)
			}
			r = <-replies
			if r.err != nil || r.status != http.StatusServiceUnavailable {
				t.Errorf("the waiting call = %d %q (%v), want 503 once closed", r.status, r.body, r.err)
			}
			if c := <-calls; !c.Armed || c.Killed || !strings.HasPrefix(c.Err, "sink closed") {
				t.Errorf("observed %+v, want the armed call ended by Close", c)
			}
			if got := len(s.Journal()); got != tt.waitJournal+1 {
				t.Errorf("journal has %d entries after Close, want %d", got, tt.waitJournal+1)
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if r := do(root(s), call{path: "/effect/0", body: "late"}); r.err == nil {
				t.Errorf("a call after Close = %d %q, want no connection", r.status, r.body)
			}
		})
	}
}

// awaitJournal polls until the journal holds n entries, failing a hung test.
func awaitJournal(t *testing.T, s *sink.Sink, n int) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for len(s.Journal()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("journal has %d entries after %v, want %d", len(s.Journal()), bound, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Ensure concurrent calls from several replicas get distinct values, each
// the sequence number of its own journal entry, with no gap.
func TestConcurrentCalls(t *testing.T) {
	const replicas, each = 4, 25
	s := start(t, sink.Config{Replicas: replicas})
	type got struct {
		body  string
		value string
	}
	results := make([]got, replicas*each)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			body := fmt.Sprintf("intent-%d", i)
			r := do(root(s), call{path: fmt.Sprintf("/effect/%d", i%replicas), body: body})
			if r.err != nil || r.status != 200 {
				t.Errorf("call %d = %d %q (%v)", i, r.status, r.body, r.err)
			}
			results[i] = got{body, r.body}
		})
	}
	wg.Wait()
	journal := s.Journal()
	if len(journal) != len(results) {
		t.Fatalf("journal has %d entries, want %d", len(journal), len(results))
	}
	bySeq := map[string]sink.Entry{}
	for i, e := range journal {
		if e.Seq != int64(i+1) {
			t.Fatalf("journal[%d].Seq = %d", i, e.Seq)
		}
		bySeq[fmt.Sprint(e.Seq)] = e
	}
	values := map[string]bool{}
	for i, r := range results {
		e, ok := bySeq[r.value]
		if !ok || values[r.value] || e.BodySHA256 != sum(r.body) || e.Replica != i%replicas {
			t.Errorf("call %d got value %q: entry %+v, seen before %v", i, r.value, e, values[r.value])
		}
		values[r.value] = true
	}
}

// Ensure concurrent calls with one forwarded key and body, some delayed
// before their effect (an owner in flight), from every replica, apply one
// effect: every call answers its value, the others are journaled as its
// replays and observed as such.
func TestConcurrentForwardedKey(t *testing.T) {
	const replicas, each = 4, 10
	calls := make(chan sink.Call, replicas*each)
	s := start(t, sink.Config{Replicas: replicas, Observe: func(c sink.Call) { calls <- c }})
	for r := range replicas {
		defer s.Arm(r, []byte("pay"), sink.Action{Before: 20 * time.Millisecond, Apply: true, End: sink.Answer})()
	}
	var wg sync.WaitGroup
	for i := range replicas * each {
		wg.Go(func() {
			r := do(root(s), call{path: fmt.Sprintf("/effect/%d", i%replicas), body: "pay", header: http.Header{"Idempotency-Key": {"k"}}})
			if r.err != nil || r.status != 200 || r.body != "1" {
				t.Errorf("call %d = %d %q (%v), want 200 \"1\"", i, r.status, r.body, r.err)
			}
		})
	}
	wg.Wait()
	if got := len(sink.Effects(s.Journal())); got != 1 {
		t.Errorf("%d effects applied, want 1", got)
	}
	replays := 0
	for range replicas * each {
		c := <-calls
		if c.Seq != 1 || c.Status != 200 || c.Err != "" {
			t.Errorf("observed %+v, want seq 1, 200", c)
		}
		if c.Replay {
			replays++
		}
	}
	if got, want := replays, replicas*each-1; got != want {
		t.Errorf("%d calls observed as replays, want %d", got, want)
	}
	for i, e := range s.Journal() {
		if e.Seq != 1 || e.Replayed != (i > 0) || deref(e.Key) != `"k"` {
			t.Errorf("journal[%d] = %+v, want seq 1, replayed %v, key k", i, e, i > 0)
		}
	}
}

// Ensure an entry says when its call was received, before the sink's wait:
// a call delayed 50 ms is received at least 50 ms before it is applied.
func TestReceivedBeforeDelay(t *testing.T) {
	s := start(t, sink.Config{Replicas: 1})
	defer s.Arm(0, []byte("pay"), sink.Action{Before: 50 * time.Millisecond, Apply: true, End: sink.Answer})()
	sent := time.Now()
	if r := do(root(s), call{path: "/effect/0", body: "pay"}); r.status != 200 {
		t.Fatalf("call = %d %q (%v), want 200", r.status, r.body, r.err)
	}
	e := s.Journal()[0]
	if e.Received.Before(sent) || e.Applied.Sub(e.Received) < 50*time.Millisecond {
		t.Errorf("sent %v, received %v, applied %v: want received after sending, applied 50 ms or more later", sent, e.Received, e.Applied)
	}
}

// Ensure a forwarded key reused with another body is observed refused, and
// that the refusal keeps the arm's end: a kill still kills, applying nothing.
func TestReusedKeyKeepsItsEnd(t *testing.T) {
	calls := make(chan sink.Call, 2)
	killed := make(chan int, 1)
	// Not Idempotency-Key: net/http sends a request carrying it again on
	// a kept-alive connection closed unanswered.
	s := start(t, sink.Config{Replicas: 1, KeyHeader: "Pay-Key", Kill: func(r int) { killed <- r }, Observe: func(c sink.Call) { calls <- c }})
	if r := do(root(s), call{path: "/effect/0", body: "a", header: http.Header{"Pay-Key": {"k"}}}); r.status != 200 {
		t.Fatalf("first call = %d %q (%v)", r.status, r.body, r.err)
	}
	<-calls
	defer s.Arm(0, []byte("b"), sink.Action{Apply: true, End: sink.Kill})()
	if r := do(root(s), call{path: "/effect/0", body: "b", header: http.Header{"Pay-Key": {"k"}}}); r.err == nil {
		t.Fatalf("reused key under a kill = %d %q, want no reply", r.status, r.body)
	}
	c := <-calls
	if !c.Killed || c.Seq != 0 || c.Replay || c.Err != "key reused with another body: nothing applied" {
		t.Errorf("observed %+v, want killed, nothing applied, the reuse said", c)
	}
	if got := <-killed; got != 0 {
		t.Errorf("killed replica %d, want 0", got)
	}
	checkJournal(t, s.Journal(), []entry{{0, "a", key("k"), 0}})
}

// Ensure Start names what is wrong with a config.
func TestStartRejects(t *testing.T) {
	kill := func(int) {}
	tests := []struct {
		cfg  sink.Config
		want string
	}{
		{sink.Config{Replicas: 0, Kill: kill}, "replicas 0 out of range 1..16"},
		{sink.Config{Replicas: 17, Kill: kill}, "replicas 17 out of range 1..16"},
		{sink.Config{Replicas: 1}, "no Kill function"},
		{sink.Config{Replicas: 1, Kill: kill, KeyHeader: "Bad Key"}, `key header "Bad Key" is not a header name`},
		{sink.Config{Replicas: 1, Kill: kill, MaxBody: -1}, "max body -1 out of range"},
		{sink.Config{Replicas: 1, Kill: kill, MaxBody: sink.MaxMaxBody + 1}, "max body 67108865 out of range"},
	}
	for _, tt := range tests {
		s, err := sink.Start(tt.cfg)
		if err == nil {
			s.Close()
			t.Errorf("Start(%+v) succeeded, want %q", tt.cfg, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Start(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// Ensure Validate accepts the lab's sink faults and names what is wrong
// with any other Action; Arm panics on what Validate refuses, on a replica
// the sink does not serve, and past MaxArms arms outstanding.
func TestValidate(t *testing.T) {
	tests := []struct {
		action sink.Action
		want   string // "" for valid
	}{
		{sink.Normal, ""},
		{sink.Action{Before: sink.MaxWait, Apply: true, End: sink.Answer}, ""},
		{sink.Action{End: sink.Fail}, ""},
		{sink.Action{End: sink.Kill}, ""},
		{sink.Action{Apply: true, After: sink.MaxWait, End: sink.Kill}, ""},
		{sink.Action{}, "unknown end End(0)"},
		{sink.Action{Apply: true, End: sink.Drop}, ""},
		{sink.Action{End: sink.Drop}, ""},
		{sink.Action{Apply: true, End: 5}, "unknown end End(5)"},
		{sink.Action{End: sink.Answer}, "answer without applying"},
		{sink.Action{Before: -1, Apply: true, End: sink.Answer}, "before -1ns out of range"},
		{sink.Action{Apply: true, After: sink.MaxWait + 1, End: sink.Answer}, "after 1m0.000000001s out of range"},
	}
	s := start(t, sink.Config{Replicas: 1})
	for _, tt := range tests {
		err := tt.action.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tt.action, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tt.action, err, tt.want)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v: Arm did not panic", tt.action)
				}
			}()
			s.Arm(0, nil, tt.action)
		}()
	}
	panics := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	panics("Arm for replica 1 of 1", func() { s.Arm(1, nil, sink.Normal) })
	panics("URL of replica -1", func() { s.URL(-1) })
	for range sink.MaxArms {
		s.Arm(0, []byte("leak"), sink.Normal)
	}
	panics("Arm past MaxArms outstanding", func() { s.Arm(0, []byte("leak"), sink.Normal) })
	for e, want := range map[sink.End]string{sink.Answer: "answer", sink.Fail: "fail", sink.Kill: "kill", sink.Drop: "drop", 0: "End(0)"} {
		if got := e.String(); got != want {
			t.Errorf("End(%d).String() = %q, want %q", int(e), got, want)
		}
	}
}

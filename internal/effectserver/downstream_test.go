package effectserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"idemlab/internal/client"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
	"idemlab/internal/store/durable"
)

// testLease is the upstream's lease in the downstream tests; afterLease
// waits it out.
const testLease = 300 * time.Millisecond

func afterLease() { time.Sleep(testLease + 150*time.Millisecond) }

// ledgerAndUpstream starts a ledger (durable, faults on) and an upstream on
// kind calling it, forwarding keys or not.
func ledgerAndUpstream(t *testing.T, kind protocol.Store, forward bool, edit func(*Config)) (ledger, up *fixture) {
	t.Helper()
	ledger = newFixture(t, on(protocol.Durable, faults))
	up = newFixture(t, on(kind, func(c *Config) {
		c.Faults = true
		c.Downstream = ledger.http.URL + protocol.EffectPath
		c.ForwardKey = forward
		c.Service = DefaultService
		c.Lease = testLease
		if edit != nil {
			edit(c)
		}
	}))
	return ledger, up
}

// call makes one lab call to f and returns what came back (status 0: no reply).
func call(t *testing.T, f *fixture, key, fault string) client.Reply {
	t.Helper()
	r := client.Request{Body: []byte(protocol.DefaultBody), Fault: fault}
	if key != "" {
		r.Key = &key
	}
	rep, err := client.New(5*time.Second).Post(context.Background(), f.http.URL+protocol.EffectPath, r)
	if err != nil {
		return client.Reply{}
	}
	return rep
}

// Ensure the downstream mode's recovery points on every store: a crash
// after the ledger call, a crash after the claim, a dropped ledger reply;
// each retried within the lease (409 with Retry-After, or a replay) and
// after it (a takeover that calls the ledger again), with the ledger's
// counter 1 when the key is forwarded and 2 when it is not.
func TestDownstreamRecoveryPoints(t *testing.T) {
	type step struct {
		fault      string
		wait       bool   // wait out the lease first
		status     int    // 0: no reply
		body       string // checked when not ""
		retryAfter bool   // a Retry-After header of at least 1s
	}
	tests := []struct {
		name    string
		forward bool
		steps   []step
		ledger  int64
	}{
		{"replay", true, []step{
			{status: 200, body: "1"},
			{status: 200, body: "1"},
		}, 1},
		{"crash after downstream, forwarded", true, []step{
			{fault: "crash-after-downstream"},
			{status: 409, retryAfter: true},
			{wait: true, status: 200, body: "1"},
			{status: 200, body: "1"},
		}, 1},
		{"crash after downstream, unforwarded", false, []step{
			{fault: "crash-after-downstream"},
			{wait: true, status: 200, body: "2"},
		}, 2},
		{"crash after claim", true, []step{
			{fault: "crash-after-claim"},
			{status: 409, retryAfter: true},
			{wait: true, status: 200, body: "1"},
		}, 1},
		{"ledger reply dropped, forwarded", true, []step{
			{fault: "drop-downstream-reply", status: 502, body: "downstream call failed: no_reply\n", retryAfter: true},
			{status: 409, retryAfter: true},
			{wait: true, status: 200, body: "1"},
		}, 1},
		{"ledger reply dropped, unforwarded", false, []step{
			{fault: "drop-downstream-reply", status: 502, retryAfter: true},
			{wait: true, status: 200, body: "2"},
		}, 2},
	}
	for _, kind := range []protocol.Store{protocol.Volatile, protocol.Durable, protocol.Postgres} {
		for _, tt := range tests {
			t.Run(string(kind)+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				ledger, up := ledgerAndUpstream(t, kind, tt.forward, nil)
				for i, s := range tt.steps {
					if s.wait {
						afterLease()
					}
					rep := call(t, up, "k1", s.fault)
					if rep.Status != s.status || s.body != "" && string(rep.Body) != s.body {
						t.Fatalf("step %d (%s): %d %q, want %d %q", i, s.fault, rep.Status, rep.Body, s.status, s.body)
					}
					if got := rep.RetryAfter >= time.Second; got != s.retryAfter {
						t.Fatalf("step %d (%s): Retry-After %v, want one: %v", i, s.fault, rep.RetryAfter, s.retryAfter)
					}
				}
				if got, want := ledger.counter(), tt.ledger; got != want {
					t.Fatalf("ledger counter = %d, want %d", got, want)
				}
				if got := up.counter(); got != 0 {
					t.Fatalf("upstream counter = %d, want 0 (the effect is the ledger's)", got)
				}
			})
		}
	}
}

// Ensure the forwarded key is a valid key, scoped by service, and that two
// services sharing a ledger do not collide on a key their clients share.
func TestForwardedKey(t *testing.T) {
	a, b := ForwardedKey("payments", "order-1"), ForwardedKey("refunds", "order-1")
	for _, k := range []string{a, b} {
		if got, err := protocol.ParseKey(k); err != nil || got != k || !strings.HasPrefix(k, "fw-") || len(k) != 43 {
			t.Fatalf("ForwardedKey = %q (%v), want fw- and 40 hex digits", k, err)
		}
	}
	if a == b {
		t.Fatalf("two services forward the same key %q", a)
	}
	if again := ForwardedKey("payments", "order-1"); again != a {
		t.Fatalf("ForwardedKey is not stable: %q then %q", a, again)
	}
	ledger := newFixture(t, on(protocol.Durable, faults))
	for _, svc := range []string{"payments", "refunds"} {
		up := newFixture(t, func(c *Config) {
			c.Downstream, c.ForwardKey, c.Service, c.Lease = ledger.http.URL+protocol.EffectPath, true, svc, testLease
		})
		if rep := call(t, up, "order-1", ""); rep.Status != 200 {
			t.Fatalf("%s: %d %q", svc, rep.Status, rep.Body)
		}
	}
	if got := ledger.counter(); got != 2 {
		t.Fatalf("ledger counter = %d, want 2 (one effect per service)", got)
	}
}

// Ensure the key TTL in the downstream mode: a retry after the upstream's
// key expired calls the ledger again (2 effects unforwarded, 1 when the
// ledger keeps the forwarded key), and an expired key frees its place.
func TestDownstreamKeyTTL(t *testing.T) {
	const ttl = 200 * time.Millisecond
	for _, kind := range []protocol.Store{protocol.Volatile, protocol.Durable, protocol.Postgres} {
		for _, forward := range []bool{true, false} {
			t.Run(string(kind)+"/forward="+map[bool]string{true: "true", false: "false"}[forward], func(t *testing.T) {
				t.Parallel()
				ledger, up := ledgerAndUpstream(t, kind, forward, func(c *Config) { c.KeyTTL = ttl; c.Capacity = 1 })
				if rep := call(t, up, "k1", ""); rep.Status != 200 || string(rep.Body) != "1" {
					t.Fatalf("first call: %d %q", rep.Status, rep.Body)
				}
				if rep := call(t, up, "k2", ""); rep.Status != 429 {
					t.Fatalf("a new key in a full registry: %d %q, want 429", rep.Status, rep.Body)
				}
				time.Sleep(ttl + 100*time.Millisecond)
				want, n := "2", int64(2)
				if forward {
					want, n = "1", 1
				}
				if rep := call(t, up, "k1", ""); rep.Status != 200 || string(rep.Body) != want || rep.Replayed == nil || *rep.Replayed {
					t.Fatalf("retry after the TTL: %d %q replayed %v, want 200 %q not replayed", rep.Status, rep.Body, rep.Replayed, want)
				}
				time.Sleep(ttl + 100*time.Millisecond)
				if rep := call(t, up, "k2", ""); rep.Status != 200 {
					t.Fatalf("a new key once the old one expired: %d %q, want 200", rep.Status, rep.Body)
				}
				if got := ledger.counter(); got != n+1 {
					t.Fatalf("ledger counter = %d, want %d", got, n+1)
				}
			})
		}
	}
}

// Ensure the downstream faults are refused by a server without -downstream,
// and an unkeyed request calls the ledger without a key.
func TestDownstreamFaultsNeedDownstream(t *testing.T) {
	f := newFixture(t, faults)
	for _, fault := range []string{"crash-after-claim", "crash-after-downstream", "drop-downstream-reply", "slow,drop-downstream-reply"} {
		rep := call(t, f, "k", fault)
		if want := "X-Lab-Fault: " + fault + " acts only on a server started with -downstream\n"; rep.Status != 400 || string(rep.Body) != want {
			t.Errorf("%s: %d %q, want 400 %q", fault, rep.Status, rep.Body, want)
		}
	}
	ledger, up := ledgerAndUpstream(t, protocol.Durable, true, nil)
	for want := range []string{"1", "2"} {
		if rep := call(t, up, "", ""); rep.Status != 200 || string(rep.Body) != []string{"1", "2"}[want] {
			t.Fatalf("unkeyed call %d: %d %q", want, rep.Status, rep.Body)
		}
	}
	if !strings.Contains(ledger.log.String(), `key=""`) {
		t.Fatalf("ledger log shows no unkeyed request:\n%s", ledger.log.String())
	}
}

// Ensure the end of the shutdown grace cuts the downstream mode's fault
// sleeps too: a delay cut before the ledger call releases the claim (the
// key is free at once, the ledger untouched); a stall cut after the call
// leaves the claim to its lease, as a crash there would (the ledger
// applied).
func TestDownstreamCutAtGrace(t *testing.T) {
	tests := []struct {
		fault  string
		state  store.ClaimState // of a new claim of the key after the cut
		ledger int64
	}{
		{"delay=60000ms", store.Owned, 0},
		{"stall=60000ms", store.Busy, 1},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			ledger := newFixture(t, on(protocol.Durable, faults))
			dir := t.TempDir()
			r := startRunWith(t, limits{read: within, conns: 8, grace: 200 * time.Millisecond}, func(c *Config) {
				c.Store, c.StateDir = protocol.Durable, dir
				c.Downstream = ledger.http.URL + protocol.EffectPath
				c.ForwardKey, c.Service, c.Lease = true, DefaultService, time.Minute
			})
			c := servertest.InFlight(t, r.addr, within, "k", tt.fault)
			if tt.ledger > 0 {
				// The ledger applied: the request is past the call, in its
				// stall (else, on a slow machine, the grace could end
				// before the call).
				waitFor(t, func() bool { return ledger.counter() == tt.ledger })
			}
			if err := r.stop(); err != nil {
				t.Fatalf("run = %v, want nil", err)
			}
			servertest.NoReply(t, c, within)
			if log := r.log.String(); !strings.Contains(log, "outcome=cut") {
				t.Errorf("log does not say the request was cut:\n%s", log)
			}
			if got := ledger.counter(); got != tt.ledger {
				t.Errorf("ledger counter = %d, want %d", got, tt.ledger)
			}
			st, err := durable.Open(dir, protocol.DefaultCapacity)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			claim, err := st.Claim(store.Intent{Key: "k", Fingerprint: store.FingerprintOf([]byte(protocol.DefaultBody))}, time.Minute)
			if err != nil || claim.State != tt.state {
				t.Errorf("Claim after the cut = %+v, %v, want state %d", claim, err, tt.state)
			}
		})
	}
}

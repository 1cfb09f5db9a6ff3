package caserun

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"idemlab/internal/audit/strict"
	"idemlab/internal/casefile"
	"idemlab/internal/protocol"
	"idemlab/internal/sink"
	"idemlab/internal/sink/sinktest"
	"idemlab/internal/target"
)

// loadCases loads the committed case files.
func loadCases(t *testing.T) []casefile.Case {
	t.Helper()
	set, err := strict.LoadSchemas(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := casefile.LoadDir(filepath.Join("..", "..", "cases"), set)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

func loadCase(t *testing.T, name string) casefile.Case {
	t.Helper()
	for _, c := range loadCases(t) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %s", name)
	return casefile.Case{}
}

// summary is a run's observations on one line: the effects, the exit
// codes, then each call as status/body/replayed or its outcome.
func summary(counter int64, codes []int, calls []string) string {
	return fmt.Sprintf("%d %v %s", counter, codes, strings.Join(calls, " "))
}

// Ensure the cases run on a target the lab did not write (the tiny
// service of package sinktest, its keys in memory unless said), with each
// fault placed on the proxy or the sink, and the effects counted by the
// sink, which honours a key the target forwards: what comes back is what
// that target really does.
func TestRunTarget(t *testing.T) {
	memory := sinktest.Service{Keys: sinktest.Memory}
	forwarding := sinktest.Service{Keys: sinktest.Memory, ForwardKey: true}
	for _, tc := range []struct {
		cas  string
		svc  sinktest.Service
		want string
	}{
		// The proxy drops the reply after the target recorded the key: the
		// retry replays.
		{"keyed_lost_reply", memory, "1 [143] no_reply 200/1/true"},
		// The sink applies, then kills the target (the crash gap): it
		// restarts with an empty table and applies again.
		{"crash_after_effect", memory, "2 [137 143] no_reply 200/2/false"},
		// The proxy holds the reply, kills the target, drops the reply.
		{"crash_after_record", memory, "2 [137 143] no_reply 200/2/false"},
		// The sink kills the target on receipt: nothing applied.
		{"crash_before_effect", memory, "1 [137 143] no_reply 200/1/false"},
		// The sink stalls the owner: the duplicates find it in flight.
		{"concurrent_duplicate", memory, "1 [143] 200/1/false " + strings.Repeat("409/-/null ", 10) + "409/-/null"},
		// With the in-flight mark set after the effect, every duplicate applies.
		{"concurrent_duplicate", sinktest.Service{Keys: sinktest.Memory, Flaw: sinktest.CheckThenSet}, "12 [143] " + strings.TrimSpace(strings.Repeat("200/?/false ", 12))},
		// Forwarded, the key makes the sink replay its one effect to every
		// duplicate the flaw lets through.
		{"concurrent_duplicate", sinktest.Service{Keys: sinktest.Memory, Flaw: sinktest.CheckThenSet, ForwardKey: true}, "1 [143] " + strings.TrimSpace(strings.Repeat("200/1/false ", 12))},
		// A failure after the effect frees the key: the retry calls the
		// sink again, which applies again, or replays the forwarded key.
		{"fails_after_effect_then_retry", memory, "2 [143] 502/sink 500: effect failed\n\n/null 200/2/false"},
		{"fails_after_effect_then_retry", forwarding, "1 [143] 502/sink 500: effect failed\n\n/null 200/1/false"},
		// The crash gap closed by a forwarded key: the restarted target
		// has forgotten the key, the sink has not.
		{"crash_after_effect", forwarding, "1 [137 143] no_reply 200/1/false"},
		{"crash_after_effect", sinktest.Service{Keys: sinktest.File, ForwardKey: true}, "1 [137 143] no_reply 200/1/false"},
	} {
		t.Run(fmt.Sprintf("%s/%s/%s/forward=%v", tc.cas, tc.svc.Keys, tc.svc.Flaw, tc.svc.ForwardKey), func(t *testing.T) {
			tg := sinktest.LoadTarget(t, tc.svc)
			cfg := TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: 10 * time.Second}
			obs, det, err := RunTarget(context.Background(), cfg, loadCase(t, tc.cas))
			if err != nil {
				t.Fatal(err)
			}
			var calls []string
			for _, c := range obs.Calls {
				if c.Outcome != protocol.OutcomeReply {
					calls = append(calls, string(c.Outcome))
					continue
				}
				body := "-"
				if c.Body != nil && *c.Body != "" {
					body = *c.Body
					if tc.svc.Flaw == sinktest.CheckThenSet && !tc.svc.ForwardKey {
						body = "?" // which duplicate got which value is a race
					}
				}
				r := "null"
				if c.Replayed != nil {
					r = fmt.Sprint(*c.Replayed)
				}
				calls = append(calls, fmt.Sprintf("%d/%s/%s", *c.Status, body, r))
			}
			if got := summary(obs.Counter, obs.ExitCodes, calls); got != strings.TrimSpace(tc.want) {
				t.Fatalf("observed %s\nwant     %s\nlog: %q", got, tc.want, det.ServerLog)
			}
			if got := int64(len(sink.Effects(det.Journal))); got != obs.Counter {
				t.Fatalf("journal holds %d effects, counter says %d", got, obs.Counter)
			}
			for _, e := range det.Journal {
				if (e.Key != nil) != tc.svc.ForwardKey {
					t.Errorf("journal entry %+v: forwarded key recorded %v, want %v", e, e.Key != nil, tc.svc.ForwardKey)
				}
			}
			if left := sinktest.Leftovers(); len(left) > 0 {
				t.Fatalf("target processes left after the run: %v", left)
			}
		})
	}
}

// Ensure a target that never gets ready is killed with its group, and the
// run says why.
func TestRunTargetNeverReady(t *testing.T) {
	tg := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.Memory})
	tg.Start.ReadyLine = regexp.MustCompile("^a line it never prints$")
	tg.Start.ReadyWithin = 300 * time.Millisecond
	_, _, err := RunTarget(context.Background(), TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: time.Second}, loadCase(t, "keyed_lost_reply"))
	if err == nil || !strings.Contains(err.Error(), "not ready within") {
		t.Fatalf("RunTarget = %v, want a readiness failure", err)
	}
	if left := sinktest.Leftovers(); len(left) > 0 {
		t.Fatalf("target processes left: %v", left)
	}
}

// Ensure a target that takes UUID keys is sent, and the run records, the
// UUID of each case key, and that it reaches the sink when forwarded.
func TestRunTargetKeyFormat(t *testing.T) {
	tg := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.Memory, ForwardKey: true})
	tg.Request.KeyFormat = target.KeyUUID
	obs, det, err := RunTarget(context.Background(), TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: 10 * time.Second}, loadCase(t, "keyed_lost_reply"))
	if err != nil {
		t.Fatal(err)
	}
	want := target.UUIDKey("same")
	for i, c := range obs.Calls {
		if c.Key == nil || *c.Key != want {
			t.Errorf("call %d recorded key %v, want %s", i, c.Key, want)
		}
	}
	if len(det.Journal) != 1 || det.Journal[0].Key == nil || *det.Journal[0].Key != want {
		t.Errorf("journal = %+v, want one effect under key %s", det.Journal, want)
	}
}

// Ensure the sink reads a forwarded key from the header target.json names
// for it, and only from that one.
func TestRunTargetForwardedKeyHeader(t *testing.T) {
	tg := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.Memory, ForwardKey: true})
	tg.Effects.KeyHeader = "X-Other-Key" // the service forwards Idempotency-Key
	_, det, err := RunTarget(context.Background(), TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: 10 * time.Second}, loadCase(t, "keyed_lost_reply"))
	if err != nil {
		t.Fatal(err)
	}
	if len(det.Journal) != 1 || det.Journal[0].Key != nil {
		t.Errorf("journal = %+v, want one effect with no key read", det.Journal)
	}
}

// Ensure the downstream cases run on a target through the sink, which
// plays their ledger: a target that forwards its key gets the sink's
// replay where the case's ledger is given the key; one that does not
// applies again; where the case's ledger hears no key, neither is
// deduplicated and the journal records no key.
func TestRunTargetDownstream(t *testing.T) {
	t.Parallel()
	durable := sinktest.Service{Keys: sinktest.File}
	forwarding := sinktest.Service{Keys: sinktest.File, ForwardKey: true}
	for _, tc := range []struct {
		cas  string
		svc  sinktest.Service
		want string // effects, then each call's status and (for a 2xx) body
	}{
		{"downstream_crash_after_ledger_forwarded", forwarding, "1 no_reply 200:1 200:1"},
		{"downstream_crash_after_ledger_forwarded", durable, "2 no_reply 200:2 200:2"},
		{"downstream_crash_after_ledger_unforwarded", forwarding, "2 no_reply 200:2 200:2"},
		{"downstream_ledger_reply_dropped", forwarding, "1 502 200:1 200:1 200:1"},
		{"downstream_ledger_reply_dropped", durable, "2 502 200:2 200:2 200:2"},
	} {
		t.Run(fmt.Sprintf("%s/forward=%v", tc.cas, tc.svc.ForwardKey), func(t *testing.T) {
			t.Parallel() // each waits out its client timeouts on processes of its own
			c := loadCase(t, tc.cas)
			tg := sinktest.LoadTarget(t, tc.svc)
			if why := NotRun(c, tg); why != "" {
				t.Fatalf("NotRun = %q, want it to run", why)
			}
			obs, det, err := RunTarget(context.Background(), TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: 10 * time.Second}, c)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{fmt.Sprint(obs.Counter)}
			for _, o := range obs.Calls {
				switch {
				case o.Outcome != protocol.OutcomeReply:
					got = append(got, string(o.Outcome))
				case *o.Status/100 == 2:
					got = append(got, fmt.Sprintf("%d:%s", *o.Status, *o.Body))
				default:
					got = append(got, fmt.Sprint(*o.Status))
				}
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("observed %s, want %s", g, tc.want)
			}
			for _, e := range det.Journal {
				if want := tc.svc.ForwardKey && SinkReadsKeys(c); (e.Key != nil) != want {
					t.Errorf("journal entry %+v: a key recorded %v, want %v", e, e.Key != nil, want)
				}
			}
		})
	}
}

// Ensure that on a durable, single-process target only cases needing
// replicas, a capacity or a key TTL it does not claim are not run, and
// that a claimed key TTL lets the expiry cases run and keeps out a case
// that expects a key kept as long.
func TestNotRunCommittedCases(t *testing.T) {
	set, err := strict.LoadSchemas(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	redis, err := target.Load(filepath.Join("..", "..", "targets", "express-idempotency-redis"), set)
	if err != nil {
		t.Fatal(err)
	}
	tiny := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.File, ForwardKey: true})
	ttl := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.File, ForwardKey: true})
	ttl.Claims.KeyTTLMS, ttl.Claims.Capacity = new(int64(1000)), new(2)
	const (
		replicas = "the case runs 2 replicas; the target claims no shared store"
		capacity = "the case needs a capacity of 64 keys; the target claims none"
		expiry   = "the case needs keys that expire after 1000 ms; the target claims none"
	)
	want := map[string][3]string{ // express-idempotency-redis, tiny, tiny claiming a 1000 ms TTL and a capacity of 2
		"client_gives_up_owner_running":      {"", "", "the case expects a key kept 2000 ms; the target claims key_ttl_ms 1000"},
		"capacity_and_input":                 {capacity, capacity, "the case needs a capacity of 64 keys; the target claims 2"},
		"replicas_concurrent_duplicate":      {"", replicas, replicas},
		"replicas_lost_reply":                {"", replicas, replicas},
		"replicas_crash_after_effect":        {"", replicas, replicas},
		"replicas_owner_crash_waiter":        {"", replicas, replicas},
		"replicas_body_conflict":             {"", replicas, replicas},
		"downstream_crash_after_claim":       {"", replicas, replicas},
		"downstream_key_expired_unforwarded": {expiry, expiry, ""},
		"downstream_key_expired_forwarded":   {expiry, expiry, ""},
		"capacity_key_expiry":                {expiry, expiry, ""},
	}
	cases, err := casefile.LoadDir(filepath.Join("..", "..", "cases"), set)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for i, tg := range []*target.Target{redis, tiny, ttl} {
			if got, want := NotRun(c, tg), want[c.Name][i]; got != want {
				t.Errorf("NotRun(%s, %s #%d) = %q, want %q", c.Name, tg.Name, i, got, want)
			}
		}
	}
}

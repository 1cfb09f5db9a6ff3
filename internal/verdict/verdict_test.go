package verdict

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/casefile"
	"idemlab/internal/protocol"
	"idemlab/internal/results"
	"idemlab/internal/schemacheck"
	"idemlab/internal/target"
)

// cases loads the committed case files by name.
func cases(t *testing.T) map[string]casefile.Case {
	t.Helper()
	set, err := schemacheck.Load(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := casefile.LoadDir(filepath.Join("..", "..", "cases"), set)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]casefile.Case{}
	for _, c := range all {
		out[c.Name] = c
	}
	return out
}

// call builds an observed call from a short form: "200 1 true" (status,
// body, replayed: true, false or - for none), "409 - - ra" (with
// Retry-After), or an outcome such as "no_reply".
func call(s string) results.Call {
	f := strings.Fields(s)
	if len(f) == 1 {
		return results.Call{Outcome: protocol.Outcome(f[0])}
	}
	var st int
	fmt.Sscan(f[0], &st)
	c := results.Call{Outcome: protocol.OutcomeReply, Status: &st}
	if f[1] != "-" {
		b := f[1]
		c.Body = &b
	}
	if f[2] != "-" {
		r := f[2] == "true"
		c.Replayed = &r
	}
	if len(f) > 3 && f[3] == "ra" {
		ra := "1"
		c.RetryAfter = &ra
	}
	return c
}

func run(counter int64, calls ...string) results.Run {
	r := results.Run{Counter: counter}
	for _, c := range calls {
		r.Calls = append(r.Calls, call(c))
	}
	return r
}

func repeat(n int, c string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = c
	}
	return out
}

var (
	inMemory = Judged{Claims: target.Claims{}, Marker: true}
	durable  = Judged{Claims: target.Claims{Durable: true}, Marker: true}
	noMarker = Judged{Claims: target.Claims{}, Marker: false}
)

// Ensure each safety rule and conformance deviation is found where a
// target broke it, a claim turns a finding into a limitation, and a sound
// target passes.
func TestJudge(t *testing.T) {
	all := cases(t)
	for _, tc := range []struct {
		name, cas string
		j         Judged
		run       results.Run
		safety    Safety
		want      []string // rule@call, findings then deviations
	}{
		{"sound lost reply", "keyed_lost_reply", inMemory, run(1, "no_reply", "200 1 true"), Pass, nil},
		{"no replay marker", "keyed_lost_reply", noMarker, run(1, "no_reply", "200 1 -"), Pass, []string{"replay_marker@1"}},
		{"replay marked fresh", "keyed_lost_reply", inMemory, run(1, "no_reply", "200 1 false"), Pass, []string{"replay_marker@1"}},
		{"lost reply applied twice", "keyed_lost_reply", inMemory, run(2, "no_reply", "200 2 false"), Violation, []string{"duplicate_effect@run"}},
		{"other body replayed", "body_conflict", inMemory, run(1, "200 1 false", "200 1 true"), Violation, []string{"other_body_replayed@1"}},
		{"other body 409", "body_conflict", inMemory, run(1, "200 1 false", "409 - - ra"), Pass, []string{"conflict_status@1"}},
		{"other body 417 without retry-after", "body_conflict", inMemory, run(1, "200 1 false", "417 - -"), Pass, []string{"conflict_status@1"}},
		{"restart forgets keys: a limitation", "restart_after_reply", inMemory, run(2, "200 1 false", "200 2 false"), Limitation, []string{"duplicate_effect@run"}},
		{"restart forgets keys on a durable claim", "restart_after_reply", durable, run(2, "200 1 false", "200 2 false"), Violation, []string{"duplicate_effect@run"}},
		{"crash gap: stuck key", "crash_after_effect", durable, run(1, "no_reply", "409 - - ra"), Violation, []string{"stuck_key@1"}},
		{"crash before the effect, then stuck", "crash_before_effect", durable, run(0, "no_reply", "409 - -"), Violation, []string{"lost_effect@run", "stuck_key@1", "retry_after@1"}},
		{"crash after record replays", "crash_after_record", durable, run(1, "no_reply", "200 1 true"), Pass, nil},
		{"concurrent 409s", "concurrent_duplicate", inMemory, run(1, append([]string{"200 1 false"}, repeat(11, "409 - - ra")...)...), Pass, nil},
		{"concurrent 409s without retry-after", "concurrent_duplicate", inMemory, run(1, append([]string{"200 1 false"}, repeat(11, "409 - -")...)...), Pass, repeatRule("retry_after", 1, 11)},
		{"concurrent 500s", "concurrent_duplicate", inMemory, run(1, append([]string{"200 1 false"}, repeat(11, "500 x -")...)...), Pass, repeatRule("in_flight_status", 1, 11)},
		{"an oversized key taken shifts the values", "oversized_key_and_body", inMemory, run(2, "200 1 false", "413 - -", "200 2 false"), Pass, []string{"malformed_key@0"}},
		{"a failure stored and replayed", "effect_fails_then_retry", inMemory, run(0, "500 x -", "500 x -"), Violation, []string{"lost_effect@run", "stored_failure@1"}},
		{"a failed handler leaves its key in progress", "effect_fails_then_retry", inMemory, run(0, "500 x -", "409 - - ra"), Violation, []string{"lost_effect@run", "stuck_key@1"}},
		{"concurrent applied twice", "concurrent_duplicate", inMemory, run(2, append([]string{"200 1 false", "200 2 false"}, repeat(10, "200 1 true")...)...), Violation, []string{"duplicate_effect@run"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := all[tc.cas]
			if !ok {
				t.Fatalf("no case %s", tc.cas)
			}
			v, err := Judge(c, tc.j, tc.run)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range append(v.Findings, v.Deviations...) {
				at := "run"
				if f.Call != nil {
					at = fmt.Sprint(*f.Call)
				}
				got = append(got, f.Rule+"@"+at)
			}
			if g, w := strings.Join(got, " "), strings.Join(tc.want, " "); g != w {
				t.Errorf("findings = %s, want %s (%+v)", g, w, v)
			}
			if v.Safety != tc.safety {
				t.Errorf("Safety = %s, want %s", v.Safety, tc.safety)
			}
		})
	}
}

func repeatRule(rule string, from, n int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Sprintf("%s@%d", rule, i))
	}
	return out
}

// Ensure a run that does not line up with its case's steps is an error,
// not a verdict.
func TestJudgeMisaligned(t *testing.T) {
	if _, err := Judge(cases(t)["keyed_lost_reply"], inMemory, run(1, "no_reply")); err == nil {
		t.Fatal("Judge of 1 call for a 2-call case = nil error")
	}
}

// Ensure a case a target cannot express says why, and one it can runs.
func TestNotRun(t *testing.T) {
	all := cases(t)
	set, err := schemacheck.Load(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	load := func(effects, claims string) *target.Target {
		src := `{"name": "tiny", "summary": "s", "start": {"argv": ["x", "{port}"], "ready": {"tcp": true}},
"request": {"path": "/e", "key_header": "Idempotency-Key"}, "replay": null, "effects": ` + effects + `,
"claims": ` + claims + `}`
		tg, err := target.Parse("tiny/target.json", []byte(src), set)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	none := `{"durable": false, "shared_store": false, "capacity": null, "max_body": null}`
	sink := load(`"sink"`, none)
	counted := load(`{"count": ["cat", "{state}/n"]}`, none)
	shared := load(`"sink"`, `{"durable": true, "shared_store": true, "capacity": 64, "max_body": 100000}`)
	for _, tc := range []struct {
		cas  string
		tg   *target.Target
		want string
	}{
		{"keyed_lost_reply", sink, ""},
		{"crash_after_effect", sink, ""},
		{"crash_after_effect", counted, "acts at the effect sink"},
		{"crash_after_record", counted, ""},
		{"replicas_lost_reply", sink, "claims no shared store"},
		{"replicas_lost_reply", shared, ""},
		{"downstream_crash_after_claim", shared, "own ledger"},
		{"capacity_key_expiry", shared, "expire after 1000 ms"},
		{"capacity_and_input", sink, "capacity of 64 keys; the target claims none"},
		{"capacity_and_input", shared, "4097-byte body to be refused; the target claims max_body 100000"},
	} {
		got := NotRun(all[tc.cas], tc.tg)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("NotRun(%s) = %q, want %q", tc.cas, got, tc.want)
		}
	}
}

// Ensure Mirror finds every difference between a native run and the same
// server run as a target, and none where they agree.
func TestMirror(t *testing.T) {
	native := run(1, "no_reply", "200 1 true")
	native.ExitCodes = []int{0}
	same := run(1, "no_reply", "200 1 true")
	same.ExitCodes = []int{0}
	same.Calls[1].RetryAfter = new(string)
	if d := Mirror(native, same); len(d) != 0 {
		t.Fatalf("Mirror of equal runs = %q, want none", d)
	}
	other := run(2, "no_reply", "200 2 false")
	other.ExitCodes = []int{137}
	if d := Mirror(native, other); len(d) != 3 {
		t.Fatalf("Mirror = %q, want the effects, the exit codes and call 1", d)
	}
}

package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// What the audit's checker finds in each kind of history is specified by
// the shared corpus (spec_test.go, testdata/spec/chaos); these tests cover
// the reader's strictness, which the corpus does not.

// bodySHA is a made-up body digest for intent n.
func bodySHA(n int) string {
	s := sha256.Sum256([]byte(fmt.Sprint("intent ", n)))
	return hex.EncodeToString(s[:])
}

// histLines builds a small history of one place shared by two replicas:
// header, then the attempts and events given, then the place and the
// effects (intent numbers, applied in that order).
func histLines(attempts, events []string, effects []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"kind":"run","history_version":2,"store":"durable","target":"","claims":{"durable":true,"shared_store":true},"seed":1,"replicas":2,"clients":2,`+
		`"duration_ms":1000,"kill_every_ms":-1,"faults":["delay","slow","crash-before-effect","stall","crash-after-effect","crash-after-record","drop-reply","fail-effect","fail-after-effect"],`+
		`"chaos_start_us":0,"quiet_start_us":100000,"attempts":%d,"server_events":%d,"places":1}`+"\n", len(attempts), len(events))
	for _, l := range append(slices.Clone(events), attempts...) {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, `{"kind":"place","place":0,"replicas":[0,1],"counter":%d,"effects":%d}`+"\n", len(effects), len(effects))
	for i, n := range effects {
		fmt.Fprintf(&b, `{"kind":"effect","place":0,"value":%d,"body_sha256":"%s","key":null,"replica":null,"at_us":null,"called_us":null}`+"\n", i+1, bodySHA(n))
	}
	return b.String()
}

// okAttempt is a 200 attempt of intent n with value v, from start to end µs.
func okAttempt(n, attempt, v int, start, end int, replayed bool) string {
	return fmt.Sprintf(`{"kind":"attempt","intent":%d,"key":"chaos-%d","body_sha256":"%s","client":%d,"replica":%d,"attempt":%d,"phase":"chaos","start_us":%d,"end_us":%d,"fault":"","type":"ok","outcome":"reply","status":200,"value":"%d","replayed":%t,"error":""}`,
		n, n, bodySHA(n), n%2, n%2, attempt, start, end, v, replayed)
}

// Ensure the reader refuses every malformed history, naming the line.
func TestChaosReadStrict(t *testing.T) {
	good := histLines([]string{okAttempt(0, 0, 1, 0, 10, false), okAttempt(1, 0, 2, 20, 30, false)},
		[]string{`{"kind":"start","replica":0,"at_us":0,"pid":5,"addr":"127.0.0.1:1","exit_code":0,"planned":-1,"error":""}`}, []int{0, 1})
	if _, err := readChaosHistory(strings.NewReader(good)); err != nil {
		t.Fatalf("good history: %v", err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown member", `"error":""}`, `"error":"","extra":1}`, `unknown member "extra"`},
		{"missing member", `,"replayed":false`, ``, `missing member "replayed"`},
		{"unknown kind", `"kind":"start"`, `"kind":"restart"`, `unknown kind "restart"`},
		{"the event lines' shape as a kind", `"kind":"start"`, `"kind":"event"`, `unknown kind "event"`},
		{"duplicate member", `"kind":"effect",`, `"kind":"effect","kind":"effect",`, "duplicate member name"},
		{"header counts", `"attempts":2`, `"attempts":3`, "the run header announces 3"},
		{"ok without 200", `"status":200,"value":"2"`, `"status":409,"value":"2"`, `type "ok": outcome reply with status 409 is "fail"`},
		{"unknown store", `"store":"durable"`, `"store":"paper"`, `store "paper"`},
		{"replica out of range", `"replica":1,`, `"replica":2,`, "replica: 2: want an integer in 0..1"},
		{"time order", `"start_us":20,`, `"start_us":-1,`, "start_us: -1"},
		{"effects announced", `"effects":2`, `"effects":3`, "announced effect lines missing"},
		{"not JSON", `{"kind":"place"`, `{"kind":"place",`, "not a JSON object"},
		{"version 1", `"history_version":2`, `"history_version":1`, "history_version: 1"},
		{"store and target", `"target":""`, `"target":"tiny"`, "not both"},
		{"client out of range", `"client":1,`, `"client":2,`, "client: 2: want an integer in 0..1"},
		{"unknown fault kind", `"faults":["delay"`, `"faults":["nuke"`, `faults: "nuke"`},
		{"a 503 is not a failure", `"status":200,"value":"2"`, `"status":503,"value":"2"`, `outcome reply with status 503 is "info"`},
		{"a start naming a planned kill", `"planned":-1`, `"planned":0`, "a kill or kill_skipped event names its planned kill"},
		{"effect half timed", `"replica":null,"at_us":null,"called_us":null}`, `"replica":0,"at_us":5,"called_us":null}`, "all known"},
		{"effect applied before its call", `"replica":null,"at_us":null,"called_us":null}`, `"replica":0,"at_us":5,"called_us":6}`, "called_us 6 after at_us 5"},
		{"claims", `"shared_store":true}`, `"shared_store":1}`, "claims: want"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.old) {
				t.Fatalf("no %q in the history", tc.old)
			}
			_, err := readChaosHistory(strings.NewReader(strings.Replace(good, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	// A line read whole (an escape in it) with two unknown members: the
	// failure names the first by name on every read, not the one a map's
	// order gives.
	twice := strings.Replace(good, `"error":""}`, `"error":"\u0041","zz":1,"aa":2}`, 1)
	for range 20 {
		if _, err := readChaosHistory(strings.NewReader(twice)); err == nil || !strings.Contains(err.Error(), `unknown member "aa"`) {
			t.Fatalf("two unknown members: error = %v, want one naming \"aa\"", err)
		}
	}
	if _, err := readChaosHistory(strings.NewReader(strings.Repeat(" ", maxHistoryLine+1))); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a long line: error = %v", err)
	}
}

// Ensure the consistency checks name every way a history can differ from
// the schedule its seed and parameters give: an attempt's fault or
// replica, an attempt renumbered, a planned kill of another replica,
// before its time, skipped for no reason of the lab's, renumbered, called
// skipped though it landed, or missing.
func TestScheduleForged(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(specRoot, "chaos", "durable-run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(data)
	const attempt = `"intent":1,"key":"chaos-1","body_sha256":"37d5ccf00b9400956bd4abf4f7bb5dbe6f55afb725a5855de291c7db307072f4","client":0,"replica":1,"attempt":0,"phase":"chaos","start_us":30968,"end_us":36189,"fault":"drop-reply"`
	const kill = `{"kind":"kill","replica":1,"at_us":426052,"pid":5967,"addr":"127.0.0.1:35931","exit_code":0,"planned":0,"error":""}`
	issues := func(t *testing.T, history string) []string {
		h, err := readChaosHistory(strings.NewReader(history))
		if err != nil {
			t.Fatalf("readChaosHistory(forged) error = %v", err)
		}
		h.checkConsistency(chaosRunParams{durationMS: h.durationMS, killEveryMS: h.killEveryMS, maxAttempts: 8, quietAttempts: 40})
		var out []string
		for _, is := range h.issues {
			out = append(out, is.rule+": "+is.text)
		}
		return out
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"nothing forged", "", "", ""},
		{"another fault", attempt, strings.Replace(attempt, `"fault":"drop-reply"`, `"fault":"slow"`, 1), `schedule: line 4: intent 1's attempt 0 went to replica 1 with fault "slow"; the schedule of seed 1 (2 replicas`},
		{"another replica", attempt, strings.Replace(attempt, `"replica":1`, `"replica":0`, 1), `intent 1's attempt 0 went to replica 0 with fault "drop-reply"`},
		{"an attempt renumbered", attempt, strings.Replace(attempt, `"attempt":0`, `"attempt":1`, 1), "attempt_order: line 4: intent 1's attempt 1 follows"},
		{"a kill of another replica", kill, strings.Replace(kill, `"replica":1`, `"replica":0`, 1), "kills: line 73: kill of planned kill 0 is of replica 0; the plan's is of replica 1"},
		{"a kill before its time", kill, strings.Replace(kill, `"at_us":426052`, `"at_us":400000`, 1), "planned kill 0 came at 400000 µs, before its time (425769 µs)"},
		{"a skip for no reason", kill, strings.Replace(strings.Replace(kill, `"kill"`, `"kill_skipped"`, 1), `"error":""`, `"error":"it was tired"`, 1), "planned kill 0 skipped for a reason that is none of the lab's"},
		{"a kill renumbered", kill, strings.Replace(kill, `"planned":0`, `"planned":1`, 1), "kill of planned kill 1; the nemesis's plan for seed 1 (5 planned, every 500 ms over 3000 ms) names planned kill 0 next"},
		{"a kill called skipped", kill, strings.Replace(strings.Replace(kill, `"kill"`, `"kill_skipped"`, 1), `"error":""`, `"error":"the replica was down"`, 1),
			"SIGKILL ended it (137), and no kill or fault's kill of it came since it started"},
		{"a kill removed", kill + "\n", "", "names planned kill 0 next"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forged := good
			if tc.old != "" {
				if !strings.Contains(good, tc.old) {
					t.Fatalf("no %q in the history", tc.old)
				}
				forged = strings.Replace(good, tc.old, tc.new, 1)
				if tc.new == "" {
					forged = strings.Replace(forged, `"server_events":41`, `"server_events":40`, 1)
				}
			}
			got := issues(t, forged)
			// The cut keeps the intents below 50 whose effects it keeps: its
			// numbering has gaps (an "attempts" issue), whatever is forged.
			got = slices.DeleteFunc(got, func(s string) bool { return strings.HasPrefix(s, "attempts: ") })
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("the cut history unforged: issues %q, want none", got)
			case tc.want != "" && !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }):
				t.Errorf("issues %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// Ensure the duplicate rule follows the claims: promised only by a durable
// store of keys, shared when there are several replicas.
func TestChaosPromisedByClaims(t *testing.T) {
	for _, tc := range []struct {
		claims   chaosClaims
		replicas int
		want     bool
	}{
		{chaosClaims{}, 1, false}, {chaosClaims{durable: true}, 1, true}, {chaosClaims{durable: true}, 2, false},
		{chaosClaims{true, true}, 2, true}, {chaosClaims{shared: true}, 2, false},
	} {
		h := &chaosHistory{claims: tc.claims, replicas: tc.replicas}
		if got := h.promised("duplicate"); got != tc.want {
			t.Errorf("promised(duplicate) with %+v, %d replicas = %v, want %v", tc.claims, tc.replicas, got, tc.want)
		}
		if !h.promised("stuck") || !h.promised("lost_ack") {
			t.Errorf("promised with %+v, %d replicas: stuck or lost_ack not promised, want every rule but the duplicate", tc.claims, tc.replicas)
		}
	}
}

// Ensure the streamed comparison of a timeline finds the first byte that
// differs, a file cut short and a file too long.
func TestSameStream(t *testing.T) {
	want := []byte(strings.Repeat("abcdefgh", 20000))
	for _, tc := range []struct {
		name string
		got  string
		at   int64
		same bool
	}{
		{"equal", string(want), 0, true},
		{"a byte changed", string(want[:100000]) + "X" + string(want[100001:]), 100000, false},
		{"cut short", string(want[:len(want)-1]), int64(len(want) - 1), false},
		{"too long", string(want) + "!", int64(len(want)), false},
	} {
		at, _, same := sameStream(want, strings.NewReader(tc.got))
		if same != tc.same || !same && at != tc.at {
			t.Errorf("%s: sameStream = %d, %v; want %d, %v", tc.name, at, same, tc.at, tc.same)
		}
	}
}

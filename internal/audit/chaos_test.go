package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
	fmt.Fprintf(&b, `{"kind":"run","history_version":1,"store":"durable","seed":1,"replicas":2,"attempts":%d,"server_events":%d,"places":1}`+"\n", len(attempts), len(events))
	for _, l := range append(slices.Clone(events), attempts...) {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, `{"kind":"place","place":0,"replicas":[0,1],"counter":%d,"effects":%d}`+"\n", len(effects), len(effects))
	for i, n := range effects {
		fmt.Fprintf(&b, `{"kind":"effect","place":0,"value":%d,"body_sha256":"%s"}`+"\n", i+1, bodySHA(n))
	}
	return b.String()
}

// okAttempt is a 200 attempt of intent n with value v, from start to end µs.
func okAttempt(n, attempt, v int, start, end int, replayed bool) string {
	return fmt.Sprintf(`{"kind":"attempt","intent":%d,"key":"chaos-%d","body_sha256":"%s","replica":%d,"attempt":%d,"phase":"chaos","start_us":%d,"end_us":%d,"fault":"","type":"ok","outcome":"reply","status":200,"value":"%d","replayed":%t,"error":""}`,
		n, n, bodySHA(n), n%2, attempt, start, end, v, replayed)
}

// Ensure the reader refuses every malformed history, naming the line.
func TestChaosReadStrict(t *testing.T) {
	good := histLines([]string{okAttempt(0, 0, 1, 0, 10, false), okAttempt(1, 0, 2, 20, 30, false)},
		[]string{`{"kind":"start","replica":0,"at_us":0,"pid":5,"addr":"127.0.0.1:1","exit_code":0,"error":""}`}, []int{0, 1})
	if _, err := readChaosHistory(strings.NewReader(good)); err != nil {
		t.Fatalf("good history: %v", err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown member", `"error":""}`, `"error":"","extra":1}`, `unknown member "extra"`},
		{"missing member", `,"replayed":false`, ``, `missing member "replayed"`},
		{"unknown kind", `"kind":"start"`, `"kind":"restart"`, `unknown kind "restart"`},
		{"duplicate member", `"kind":"effect",`, `"kind":"effect","kind":"effect",`, "duplicate member name"},
		{"header counts", `"attempts":2`, `"attempts":3`, "the run header announces 3"},
		{"ok without 200", `"status":200,"value":"2"`, `"status":503,"value":"2"`, `type "ok": outcome reply with status 503 is "fail"`},
		{"unknown store", `"store":"durable"`, `"store":"paper"`, `store "paper"`},
		{"replica out of range", `"replica":1,`, `"replica":2,`, "replica: 2: want an integer in 0..1"},
		{"time order", `"start_us":20,`, `"start_us":-1,`, "start_us: -1"},
		{"effects announced", `"effects":2`, `"effects":3`, "announced effect lines missing"},
		{"not JSON", `{"kind":"place"`, `{"kind":"place",`, "not a JSON object"},
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
	if _, err := readChaosHistory(strings.NewReader(strings.Repeat(" ", maxHistoryLine+1))); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a long line: error = %v", err)
	}
}

package casefile

import (
	"fmt"
	"strings"
	"testing"

	"idemlab/internal/protocol"
)

// seedTable is the seed lab's own table: its seven cases and what the
// volatile store must show in each, the counter and every call's outcome,
// status and Idempotency-Replayed marker. It is data the cases must keep,
// not a copy of them: deleting a seed case, or weakening or changing its
// volatile expectation, fails TestSeedTable even when regenerated evidence
// would audit clean.
//
// A call is "no_reply", or "STATUS REPLAYED" with REPLAYED true, false or
// null (header absent); "N×" before a call repeats it N times; calls are
// separated by "; ".
var seedTable = []struct {
	name    string
	counter int64
	calls   string
}{
	{"unkeyed_lost_reply", 2, "no_reply; 200 false"},
	{"keyed_lost_reply", 1, "no_reply; 200 true"},
	{"concurrent_duplicate", 1, "200 false; 11×200 true"},
	{"body_conflict", 1, "200 false; 422 null"},
	{"restart_after_reply", 2, "2×200 false"},
	{"crash_after_effect", 2, "no_reply; 200 false"},
	{"capacity_and_input", 64, "400 null; 413 null; 64×200 false; 429 null; 200 true"},
}

// Ensure every case of the seed's table is among the committed cases and
// its volatile expectation is the seed's: same counter, same calls with
// the same statuses and replay markers, each one checked (an expectation
// that stops checking a status or marker fails too).
func TestSeedTable(t *testing.T) {
	cases, err := LoadDir("../../cases", schemas(t))
	if err != nil {
		t.Fatal(err)
	}
	byName := make(map[string]Case, len(cases))
	for _, c := range cases {
		byName[c.Name] = c
	}
	for _, want := range seedTable {
		c, ok := byName[want.name]
		if !ok {
			t.Errorf("seed case %s: no case file in cases/ has this name", want.name)
			continue
		}
		x, ok := c.Expect[protocol.Volatile]
		if !ok {
			t.Errorf("%s: no volatile expectation, want the seed's (counter %d: %s)", c.File, want.counter, want.calls)
			continue
		}
		if got := x.Counter; got != want.counter {
			t.Errorf("%s: volatile counter = %d, want the seed's %d", c.File, got, want.counter)
		}
		if got := seedCalls(x.Expand()); got != want.calls {
			t.Errorf("%s: volatile calls = %q, want the seed's %q", c.File, got, want.calls)
		}
	}
}

// seedCalls writes expected calls in seedTable's notation; a status or
// replay marker the expectation does not check is "?".
func seedCalls(calls []ExpectedCall) string {
	var one []string
	for _, c := range calls {
		if c.Outcome != protocol.OutcomeReply {
			one = append(one, string(c.Outcome))
			continue
		}
		status, replayed := "?", "?"
		if c.Status != nil {
			status = fmt.Sprint(*c.Status)
		}
		switch r := c.Replayed; {
		case r == nil:
		case r.Absent:
			replayed = "null"
		default:
			replayed = fmt.Sprint(r.Value)
		}
		one = append(one, status+" "+replayed)
	}
	var runs []string
	for i := 0; i < len(one); {
		j := i
		for j < len(one) && one[j] == one[i] {
			j++
		}
		if n := j - i; n > 1 {
			runs = append(runs, fmt.Sprintf("%d×%s", n, one[i]))
		} else {
			runs = append(runs, one[i])
		}
		i = j
	}
	return strings.Join(runs, "; ")
}

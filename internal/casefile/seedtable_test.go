package casefile

import (
	"encoding/json"
	"fmt"
	"os"
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
	// The seed's capacity_and_input began with a malformed key (400) and a
	// body over the limit (413): issue 26 moved both to
	// oversized_key_and_body, so that the capacity case runs on a target
	// whatever its key syntax and body limit (the 413 now for a 1 MiB body).
	{"capacity_and_input", 64, "64×200 false; 429 null; 200 true"},
	{"oversized_key_and_body", 1, "2×400 null; 413 null; 200 false"},
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
		x, ok := volatileExpectation(t, c.File)
		if !ok {
			t.Errorf("%s: no volatile expectation, want the seed's (counter %d: %s)", c.File, want.counter, want.calls)
			continue
		}
		if got := x.Counter; got != want.counter {
			t.Errorf("%s: volatile counter = %d, want the seed's %d", c.File, got, want.counter)
		}
		if got := x.seedCalls(); got != want.calls {
			t.Errorf("%s: volatile calls = %q, want the seed's %q", c.File, got, want.calls)
		}
	}
}

// seedExpectation is a volatile expectation as the seed table reads it.
type seedExpectation struct {
	Counter int64 `json:"counter"`
	Calls   []struct {
		Outcome  protocol.Outcome `json:"outcome"`
		Status   *int             `json:"status"`
		Replayed json.RawMessage  `json:"replayed"` // absent: not checked; null: no header
		Repeat   int              `json:"repeat"`
	} `json:"calls"`
}

// volatileExpectation reads the volatile expectation of the case file at path.
func volatileExpectation(t *testing.T, path string) (*seedExpectation, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Expect struct {
			Volatile *seedExpectation `json:"volatile"`
		} `json:"expect"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Expect.Volatile, doc.Expect.Volatile != nil
}

// seedCalls writes the expected calls in seedTable's notation; a status or
// replay marker the expectation does not check is "?".
func (x *seedExpectation) seedCalls() string {
	var one []string
	for _, c := range x.Calls {
		call := string(c.Outcome)
		if c.Outcome == protocol.OutcomeReply {
			status, replayed := "?", "?"
			if c.Status != nil {
				status = fmt.Sprint(*c.Status)
			}
			if len(c.Replayed) > 0 {
				replayed = string(c.Replayed)
			}
			call = status + " " + replayed
		}
		for range max(c.Repeat, 1) {
			one = append(one, call)
		}
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

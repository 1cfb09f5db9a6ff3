package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// Hand-made histories: intent n has key "chaos-n" and body SHA-256
// "sha-n"; times are in µs. What the checker finds in each kind of history
// is specified by the shared corpus (spec_test.go, testdata/spec/chaos),
// which the audit's own checker is held to as well.

func sha(n int) string { return "sha-" + strconv.Itoa(n) }

// ack is a 200 reply to attempt 0 of intent n on replica r over [start, end].
func ack(n, r int, start, end, value int64, replayed bool) Attempt {
	return Attempt{Kind: "attempt", Intent: n, Key: "chaos-" + strconv.Itoa(n), BodySHA256: sha(n), Replica: r,
		Phase: PhaseChaos, StartUS: start, EndUS: end, Type: OK, Outcome: protocol.OutcomeReply,
		Status: 200, Value: strconv.FormatInt(value, 10), Replayed: &replayed}
}

// lost is an attempt of intent n whose reply never came.
func lost(n, r int, start, end int64) Attempt {
	return Attempt{Kind: "attempt", Intent: n, Key: "chaos-" + strconv.Itoa(n), BodySHA256: sha(n), Replica: r,
		Phase: PhaseChaos, StartUS: start, EndUS: end, Type: Info, Outcome: protocol.OutcomeNoReply, Fault: "drop-reply"}
}

// journal is one place holding the given intents' effects, values 1.. in order.
func journal(place int, replicas []int, intents ...int) Place {
	p := Place{Place: place, Replicas: replicas, Counter: int64(len(intents))}
	for i, n := range intents {
		p.Effects = append(p.Effects, store.Effect{Value: int64(i + 1), BodySHA256: sha(n)})
	}
	return p
}

func shared(attempts []Attempt, intents ...int) History {
	return History{Store: protocol.Durable, Replicas: 2, Attempts: attempts, Places: []Place{journal(0, []int{0, 1}, intents...)}}
}

// Ensure the per-intent counts add up and match the findings.
func TestCheckCounts(t *testing.T) {
	h := shared([]Attempt{
		ack(0, 0, 0, 10, 1, false),                      // once
		ack(1, 1, 20, 30, 2, false),                     // duplicate
		ack(2, 0, 40, 50, 9, false),                     // lost ack
		lost(3, 0, 60, 70),                              // stuck, applied
		lost(4, 1, 80, 90),                              // stuck, not applied
		ack(5, 1, 100, 110, 5, false), lost(5, 0, 1, 2), // once, after a lost attempt
	}, 0, 1, 1, 3, 5)
	c := CheckHistory(h)
	got := []int{c.Intents, c.Acked, c.AppliedOnce, c.Duplicates, c.NotApplied, c.LostAcks, c.Stuck}
	if want := []int{6, 4, 3, 1, 2, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("intents, acked, once, duplicates, not applied, lost acks, stuck = %v, want %v", got, want)
	}
	if v := c.Violations(protocol.Durable); len(v) != len(c.Findings) {
		t.Errorf("durable: %d violations of %d findings, want all", len(v), len(c.Findings))
	}
	if v := c.Violations(protocol.Volatile); len(v) != len(c.Findings)-1 {
		t.Errorf("volatile: %d violations of %d findings, want all but the duplicate", len(v), len(c.Findings))
	}
}

// Ensure the real-time rule needs no quadratic scan to find a late small
// value among many acknowledgements (and finds only it).
func TestCheckValueOrderMany(t *testing.T) {
	const n = 20000
	var attempts []Attempt
	var intents []int
	for i := range n {
		attempts = append(attempts, ack(i, i%2, int64(10*i), int64(10*i+5), int64(i+1), false))
		intents = append(intents, i)
	}
	// Swap the values of intents 100 and 15000: intent 100's too large
	// value puts every later one out of order; one finding, naming the
	// smallest (intent 15000's).
	attempts[100].Value, attempts[15000].Value = "15001", "101"
	intents[100], intents[15000] = 15000, 100
	c := CheckHistory(shared(attempts, intents...))
	var got []string
	for _, f := range c.Findings {
		got = append(got, fmt.Sprintf("%s %d", f.Rule, f.Intent))
	}
	if want := "[value_order 15000]"; fmt.Sprint(got) != want {
		t.Errorf("findings = %v, want %s", got, want)
	}
}

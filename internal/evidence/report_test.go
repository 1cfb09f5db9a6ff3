package evidence

import (
	"strings"
	"testing"

	"idemlab/internal/casefile"
	"idemlab/internal/protocol"
	"idemlab/internal/results"
)

// ledgerGrid is one store and two cases: a plain one whose run matches,
// and one with a ledger whose run differs from its case in the ledger's
// counter only.
func ledgerGrid() *Grid {
	one, two := int64(1), int64(2)
	plain := casefile.Case{Name: "plain", Summary: "A plain case.",
		Expect: map[protocol.Store]casefile.Expectation{protocol.Durable: {Counter: 2, ExitCodes: []int{0}}}}
	hop := casefile.Case{Name: "hop", Summary: "A case with a ledger.", Ledger: &casefile.Ledger{ForwardKey: true},
		Expect: map[protocol.Store]casefile.Expectation{protocol.Durable: {Counter: 0, ExitCodes: []int{23, 0}, LedgerCounter: &one}}}
	g := NewGrid([]casefile.Case{plain, hop}, []protocol.Store{protocol.Durable})
	g.Set(0, 0, Run{Case: plain, Store: protocol.Durable,
		Obs: results.Run{Case: "plain", Store: protocol.Durable, Counter: 2, ExitCodes: []int{0}}})
	g.Set(1, 0, Run{Case: hop, Store: protocol.Durable,
		Obs:        results.Run{Case: "hop", Store: protocol.Durable, Counter: 0, ExitCodes: []int{23, 0}, LedgerCounter: &two},
		Mismatches: []string{"ledger_counter: expected 1, observed 2"}})
	return g
}

// Ensure every place REPORT.md, the summary and the progress line give a
// run's effects shows the ledger's counter for a case with a ledger (the
// upstream's own counter, 0, would say nothing happened), and the plain
// counter otherwise.
func TestReportLedgerCounter(t *testing.T) {
	g := ledgerGrid()
	report := string(Report(g))
	for _, want := range []string{
		"| plain | 2, matches |\n",
		"| hop | ledger 2, MISMATCH |\n",
		"| plain | durable | 2 effects applied, exits [0] | 2 effects applied, exits [0] | matches |\n",
		"| hop | durable | ledger 1, upstream 0 effects applied, exits [23 0] | ledger 2, upstream 0 effects applied, exits [23 0] | MISMATCH |\n",
		"\n### durable: 2 effects applied, matches\n",
		"\n### durable: ledger 2, upstream 0 effects applied, MISMATCH\n\n- ledger_counter: expected 1, observed 2\n",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("Report() lacks %q; it is:\n%s", want, report)
		}
	}
	summary := Summary(g)
	for _, want := range []string{"plain         2  matches", "hop    ledger 2  MISMATCH"} {
		if !strings.Contains(summary, want) {
			t.Errorf("Summary() lacks %q; it is:\n%s", want, summary)
		}
	}
	if got, want := ProgressLine(g.At(1, 0)), "effects applied=0   ledger=2 calls=0"; !strings.Contains(got, want) {
		t.Errorf("ProgressLine() = %q, want it to hold %q", got, want)
	}
	if got := ProgressLine(g.At(0, 0)); strings.Contains(got, "ledger") {
		t.Errorf("ProgressLine() of a case without a ledger = %q, names a ledger", got)
	}
}

package evidence

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// This file renders a grid for people: REPORT.md, and the table and
// progress lines the runner prints. Both say what a cell means without the
// README: the number is the effects applied (the counter the server left),
// and the verdict says whether the run matches its case's expectation,
// which may be a duplicate (the lesson a case shows), not whether the
// server did right.

// Verdict words.
const (
	Match    = "matches"
	Mismatch = "MISMATCH"
)

// Verdict is the word for whether r matches its case's expectation.
func Verdict(r Run) string {
	if r.Matches() {
		return Match
	}
	return Mismatch
}

// legend says what a cell of the tables means.
const legend = `In each cell the number is the **effects applied**: the counter the server
left, read from its state after every server of the run had exited, never
from a reply. For a case with a ledger (the effect is a call to a second
effect server), the cell says "ledger N": the ledger's counter, read the same
way, with the forwarding of the key in the case's name; the upstream applies
nothing itself, and its own counter is the "upstream" number in the rows
below. "matches" means the run showed exactly what its case file expects of
that store, call by call; a case may expect a duplicate (2 effects applied),
which is the lesson it shows, not a pass of the server. "MISMATCH" means the
run differs from its case file.
`

// applied is the grid's number for a run: the effects applied, or for a
// case with a ledger "ledger N", the ledger's counter.
func applied(counter int64, ledger *int64) string {
	if ledger != nil {
		return fmt.Sprintf("ledger %d", *ledger)
	}
	return fmt.Sprint(counter)
}

// appliedLong is a run's effects in the per-run rows and headings: the
// effects applied, and for a case with a ledger also the upstream's own.
func appliedLong(counter int64, ledger *int64) string {
	if ledger != nil {
		return fmt.Sprintf("ledger %d, upstream %d effects applied", *ledger, counter)
	}
	return fmt.Sprintf("%d effects applied", counter)
}

// Report is REPORT.md, the table a person reads. It holds only what the
// audit can re-derive from the case files and results.json: no time, host,
// timing or commit (the manifest names the commit), so that the same
// sources give the same bytes at any later commit.
func Report(g *Grid) []byte {
	var b strings.Builder
	n := len(g.Runs())
	fmt.Fprintf(&b, "# idemlab report\n\n%d runs (%d cases × %d stores): %d match their case's expectation, %d do not, by the runner's own check; `audit` re-checks every one from the bytes.\n\n",
		n, len(g.Cases), len(g.Stores), g.Matching(), n-g.Matching())
	b.WriteString(legend)
	b.WriteString("\n| case |")
	for _, s := range g.Stores {
		fmt.Fprintf(&b, " %s: effects applied, verdict |", s)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(g.Stores)) + "\n")
	for i, c := range g.Cases {
		fmt.Fprintf(&b, "| %s |", c.Name)
		for j := range g.Stores {
			r := g.At(i, j)
			fmt.Fprintf(&b, " %s, %s |", applied(r.Obs.Counter, r.Obs.LedgerCounter), Verdict(r))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| case | store | expected | observed | verdict |\n|---|---|---|---|---|\n")
	for _, r := range g.Runs() {
		want := "(none)"
		if x, ok := r.Case.Expect[r.Store]; ok {
			want = fmt.Sprintf("%s, exits %v", appliedLong(x.Counter, x.LedgerCounter), x.ExitCodes)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s, exits %v | %s |\n", r.Case.Name, r.Store, want, appliedLong(r.Obs.Counter, r.Obs.LedgerCounter), r.Obs.ExitCodes, Verdict(r))
	}
	for i, c := range g.Cases {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", c.Name, c.Summary)
		for j, store := range g.Stores {
			r := g.At(i, j)
			fmt.Fprintf(&b, "\n### %s: %s, %s\n\n", store, appliedLong(r.Obs.Counter, r.Obs.LedgerCounter), Verdict(r))
			for _, m := range r.Mismatches {
				fmt.Fprintf(&b, "- %s\n", m)
			}
			if len(r.Mismatches) > 0 {
				b.WriteString("\n")
			}
			b.WriteString("| call | step | key | fault | outcome | status | body | replayed |\n|---|---|---|---|---|---|---|---|\n")
			for k, call := range r.Obs.Calls {
				fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %s | %s |\n", k, call.Step, cell(call.Key), cell(call.Fault), call.Outcome, cell(call.Status), cell(call.Body), cell(call.Replayed))
			}
		}
	}
	return []byte(b.String())
}

// cell renders an optional value for a Markdown table cell.
func cell[T any](p *T) string {
	if p == nil {
		return "—"
	}
	s := fmt.Sprint(*p)
	if _, ok := any(*p).(string); ok {
		n := len(s)
		if n > longCell {
			s = s[:cutAt(s, cutCell)]
		}
		s = "`" + strings.NewReplacer("\n", `\n`, "|", `\|`, "`", "'").Replace(s) + "`"
		if n > longCell {
			s += fmt.Sprintf("… (%d bytes)", n)
		}
	}
	return s
}

// A string cell longer than longCell bytes shows its first cutCell bytes
// (cut back to a whole character) and its length: a 10 KiB key is one
// table cell, not a 10 KiB line.
const (
	longCell = 200
	cutCell  = 40
)

// cutAt is n, moved back to the start of a UTF-8 character of s.
func cutAt(s string, n int) int {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// Summary is the table the runner prints after all runs: one row per case,
// one column per store with the effects applied and the verdict.
func Summary(g *Grid) string {
	var b strings.Builder
	b.WriteString("effects applied per (case, store) (\"ledger N\": the ledger's counter, for a case\nwith a ledger), and whether the run matches its case's expectation (a case may\nexpect a duplicate: that is its lesson, not a pass)\n\n")
	w := len("case")
	for _, c := range g.Cases {
		w = max(w, len(c.Name))
	}
	fmt.Fprintf(&b, "%-*s", w, "case")
	for _, s := range g.Stores {
		fmt.Fprintf(&b, "  %-20s", s)
	}
	b.WriteString("\n")
	for i, c := range g.Cases {
		fmt.Fprintf(&b, "%-*s", w, c.Name)
		for j := range g.Stores {
			r := g.At(i, j)
			fmt.Fprintf(&b, "  %-20s", fmt.Sprintf("%8s  %s", applied(r.Obs.Counter, r.Obs.LedgerCounter), Verdict(r)))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ProgressLine is the line the runner prints when a run has finished.
func ProgressLine(r Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s  %-29s %-8s effects applied=%-3d", Verdict(r), r.Case.Name, r.Store, r.Obs.Counter)
	if r.Obs.LedgerCounter != nil {
		fmt.Fprintf(&b, " ledger=%d", *r.Obs.LedgerCounter)
	}
	fmt.Fprintf(&b, " calls=%-3d %6.1fms", len(r.Obs.Calls), ms(r.Detail.Wall))
	for _, m := range r.Mismatches {
		fmt.Fprintf(&b, "\n          %s", m)
	}
	return b.String()
}

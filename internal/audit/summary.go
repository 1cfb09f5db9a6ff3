package audit

import (
	"fmt"
	"slices"
	"strings"
)

// summaryText is what audit -write prints before its verdict, for the
// person who just ran the lab: verdicts.json in words.
func (a *auditor) summaryText() string {
	var b strings.Builder
	a.storesSummary(&b)
	for _, t := range a.targetVerdicts {
		fmt.Fprintf(&b, "\ntarget %s", t.Target)
		if t.Skipped != "" {
			fmt.Fprintf(&b, ": skipped: %s\n", t.Skipped)
			continue
		}
		b.WriteString(": effects (sound), safety, rules\n")
		for _, r := range t.Runs {
			if r.NotRun != "" {
				fmt.Fprintf(&b, "  %-42s not run: %s\n", r.Case, r.NotRun)
				continue
			}
			var rules []string
			for _, f := range slices.Concat(r.Findings, r.Deviations) {
				if !slices.Contains(rules, f.Rule) {
					rules = append(rules, f.Rule)
				}
			}
			line := fmt.Sprintf("  %-42s %d (%d)  %s", r.Case, r.Effects, r.SoundEffects, r.Safety)
			if len(rules) > 0 {
				line += "  " + strings.Join(rules, ", ")
			}
			if len(r.Mirror) > 0 {
				line += fmt.Sprintf("  DIFFERS from the native run (%d)", len(r.Mirror))
			}
			b.WriteString(line + "\n")
		}
	}
	for _, c := range a.chaosVerdicts {
		what := "store " + c.Store
		if c.Target != "" {
			what = "target " + c.Target
		}
		if c.NotRun != "" {
			fmt.Fprintf(&b, "\nchaos on %s: not run: %s\n", what, c.NotRun)
			continue
		}
		verdict := "ok"
		if !c.OK {
			verdict = fmt.Sprintf("%d violations", c.Violations)
		}
		if c.Shown > 0 {
			verdict += fmt.Sprintf(", %d findings shown (not promised)", c.Shown)
		}
		n := c.Counts
		fmt.Fprintf(&b, "\nchaos on %s: %d intents, %d attempts; applied once %d, duplicates %d, lost acks %d, stuck %d: %s\n",
			what, n["intents"], n["attempts"], n["applied_once"], n["duplicates"], n["lost_acks"], n["stuck"], verdict)
	}
	return b.String()
}

// storesSummary writes the table of the runs on stores.
func (a *auditor) storesSummary(b *strings.Builder) {
	if len(a.storeVerdicts) == 0 {
		return
	}
	width := len("case")
	for _, c := range a.selCases {
		width = max(width, len(c.Name))
	}
	b.WriteString("effects applied per (case, store) (\"ledger N\": the ledger's counter), and whether the\nrun matches its case's expectation (a case may expect a duplicate: its lesson, not a pass)\n\n")
	fmt.Fprintf(b, "%-*s", width, "case")
	for _, s := range a.selStores {
		fmt.Fprintf(b, "  %-20s", s)
	}
	b.WriteString("\n")
	for _, c := range a.selCases {
		fmt.Fprintf(b, "%-*s", width, c.Name)
		for _, s := range a.selStores {
			i := slices.IndexFunc(a.storeVerdicts, func(v storeVerdict) bool { return v.Case == c.Name && v.Store == s })
			if i < 0 {
				continue
			}
			v := a.storeVerdicts[i]
			word := "matches"
			if !v.Matches {
				word = "MISMATCH"
			}
			fmt.Fprintf(b, "  %-20s", fmt.Sprintf("%8s  %s", v.applied, word))
		}
		b.WriteString("\n")
	}
}

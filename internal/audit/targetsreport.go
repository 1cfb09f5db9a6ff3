package audit

import (
	"cmp"
	"fmt"
	"strings"
)

// targetsLegend says what a row of TARGETS.md means (the audit's copy).
const targetsLegend = `Each target is a service the lab did not write, run between the lab's
fault proxy and its effect sink (docs/targets.md). A row judges one case:
**effects** is what the target applied (the sink's journal, or the target's
own count) beside what a sound implementation applies; **safety** is *pass*,
*limitation* (every finding is explained by what the target claims, such as
keeping its keys in memory) or *violation*; **conformance** lists the
deviations from the IETF Idempotency-Key draft, which are never safety
failures. A case the target cannot express is *not run*, with the reason.
A case runs several trials, each on fresh state (runner -trials; its own
keys and sink journal, on a process of its own or, where the case needs
none, one it shares: docs/targets.md): its
safety is the worst any trial showed, with how many trials showed it; a
case whose trials disagree is *racy*, each verdict with its count, and each
rule broken has its rate with the Wilson score interval at 95 %. The row's
effects, conformance and findings, and the calls below, are those of the
first trial that showed the case's safety verdict.
`

// targetsReport renders TARGETS.md: per target its summary, code and
// claims, a table of its cases, then per run its findings and calls.
func targetsReport(views []*targetView) []byte {
	var b strings.Builder
	b.WriteString("# idemlab targets\n\n" + targetsLegend)
	for _, t := range views {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", mdText(t.name), mdText(t.summary))
		if t.skipped != "" {
			fmt.Fprintf(&b, "Not run here: %s.\n", mdText(t.skipped))
			continue
		}
		fmt.Fprintf(&b, "- code under test: %s\n", mdText(codeUnderTest(t)))
		fmt.Fprintf(&b, "- claims: %s\n", claimsText(t.spec))
		if r := t.spec.replay; r != nil {
			fmt.Fprintf(&b, "- replay marker: %s\n", mdCode(r[0]+": "+r[1]))
		} else {
			b.WriteString("- replay marker: none\n")
		}
		if t.spec.mirrors != "" {
			fmt.Fprintf(&b, "- mirrors the native %s store: %s\n", mdText(t.spec.mirrors), mirrorSummary(trialsOf(t.runs)))
		}
		b.WriteString("\n| case | effects (sound) | safety | conformance | findings |\n|---|---|---|---|---|\n")
		for _, r := range t.runs {
			if r.NotRun != "" {
				fmt.Fprintf(&b, "| %s | — | not run | — | %s |\n", mdText(r.Case), mdText(r.NotRun))
				continue
			}
			fmt.Fprintf(&b, "| %s | %d (%d) | %s | %s | %s |\n", mdText(r.Case), r.Effects, r.SoundEffects, mdText(safetyCell(r.targetRunVerdict)),
				mdText(distinctRules(r.Deviations)), mdText(findingsCell(r.targetRunVerdict)))
		}
		for _, r := range t.runs {
			if r.NotRun == "" {
				runSection(&b, t.name, r)
			}
		}
	}
	return []byte(b.String())
}

// runSection renders a run's findings, deviations, differences from the
// native run and calls.
func runSection(b *strings.Builder, target string, r runView) {
	fmt.Fprintf(b, "\n<a id=\"%s\"></a>\n\n### %s on %s: %s applied, %s\n\n", xmlText(runAnchor(target, r.Case)),
		mdText(r.Case), mdText(target), plural(int(r.Effects), "effect"), mdText(r.Safety))
	if r.Trials > 1 || r.NotFired > 0 {
		fmt.Fprintf(b, "- trials: %s; each trial's: %s. What follows is trial %d's, the first to show %s.\n", mdText(trialsLine(r.targetRunVerdict)),
			mdText(strings.Join(r.TrialSafety, ", ")), r.Example, mdText(r.Safety))
		if r.NotFired > 0 {
			fmt.Fprintf(b, "- not judged: %s: %s\n", plural(r.NotFired, "trial"), mdText(r.NotFiredWhy))
		}
		for _, rr := range r.Rates {
			fmt.Fprintf(b, "- rate of %s: %s of the trials (Wilson 95 %%)\n", mdText(rr.Rule), rateText(rr.Trials, rr.Of))
		}
	}
	for _, f := range r.Findings {
		fmt.Fprintf(b, "- safety %s%s: %s", mdText(f.Rule), callAt(f.Call), mdText(f.Detail))
		if f.Limitation != "" {
			b.WriteString(" — a limitation: " + mdText(f.Limitation))
		}
		b.WriteString("\n")
	}
	for _, f := range r.Deviations {
		fmt.Fprintf(b, "- conformance %s%s: %s\n", mdText(f.Rule), callAt(f.Call), mdText(f.Detail))
	}
	for _, m := range r.Mirror {
		fmt.Fprintf(b, "- differs from the native run: %s\n", mdText(m))
	}
	if len(r.Findings)+len(r.Deviations)+len(r.Mirror) > 0 {
		b.WriteString("\n")
	}
	callTable(b, r.calls)
}

// callTable renders calls, as results.json or targets.json records them,
// as a Markdown table, every value escaped for its cell.
func callTable(b *strings.Builder, calls []any) {
	b.WriteString("| call | step | key | fault | outcome | status | body | replayed |\n|---|---|---|---|---|---|---|---|\n")
	for i, call := range calls {
		m, _ := call.(map[string]any)
		outcome, _ := str(m, "outcome")
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", i, mdText(render(m["step"])), mdCell(m["key"]), mdCell(m["fault"]),
			mdText(outcome), mdCell(m["status"]), mdCell(m["body"]), mdCell(m["replayed"]))
	}
}

// codeUnderTest names the libraries and the runtime.
func codeUnderTest(t *targetView) string {
	var parts []string
	for _, l := range t.libraries {
		m, _ := l.(map[string]any)
		n, _ := str(m, "name")
		v, _ := str(m, "version")
		parts = append(parts, n+" "+v)
	}
	if t.runtime != "" {
		parts = append(parts, "on "+t.runtime)
	}
	return cmp.Or(strings.Join(parts, ", "), "(not recorded)")
}

// claimsText is what the target claims, in words.
func claimsText(s *targetSpec) string {
	parts := []string{"not durable", "no shared store", "no capacity", "no body limit"}
	if s.durable {
		parts[0] = "durable"
	}
	if s.sharedStore {
		parts[1] = "a shared store"
	}
	if s.capacity != nil {
		parts[2] = fmt.Sprintf("capacity %d", *s.capacity)
	}
	if s.maxBody != nil {
		parts[3] = fmt.Sprintf("max body %d bytes", *s.maxBody)
	}
	if s.keyTTL != nil {
		parts = append(parts, fmt.Sprintf("keys expire after %d ms", *s.keyTTL))
	}
	return strings.Join(parts, ", ")
}

// mirrorSummary says whether a mirroring target's runs were the native ones.
func mirrorSummary(runs []runView) string {
	ran, differ := 0, 0
	for _, r := range runs {
		if r.NotRun == "" {
			ran++
			if len(r.Mirror) > 0 {
				differ++
			}
		}
	}
	if differ == 0 {
		return fmt.Sprintf("all %d runs identical", ran)
	}
	return fmt.Sprintf("%d of %d runs DIFFER", differ, ran)
}

// distinctRules lists each rule of fs once, in order; a dash for none.
func distinctRules(fs []finding) string {
	return cmp.Or(strings.Join(findingRules(fs), ", "), "—")
}

// safetyCell is a case's safety verdict in TARGETS.md's table: the verdict,
// over several trials with how many showed it, or racy with each count.
func safetyCell(v targetRunVerdict) string {
	switch {
	case v.NotFired > 0 || v.Racy && v.Trials > 1:
		return trialsLine(v)
	case v.Trials <= 1:
		return v.Safety
	}
	return fmt.Sprintf("%s %d/%d", v.Safety, v.Trials, v.Trials)
}

// findingsCell is a case's safety findings in TARGETS.md's table: over
// several trials, each rule's rate, then the example trial's findings.
func findingsCell(v targetRunVerdict) string {
	line := findingsLine(v.Findings)
	if v.Trials <= 1 || len(v.Rates) == 0 {
		return line
	}
	var rates []string
	for _, rr := range v.Rates {
		rates = append(rates, rr.Rule+" "+rateText(rr.Trials, rr.Of))
	}
	return strings.Join(rates, "; ") + fmt.Sprintf(" — trial %d: ", v.Example) + line
}

// findingsLine is a run's safety findings on one line; a dash for none.
func findingsLine(fs []finding) string {
	var parts []string
	for _, f := range fs {
		s := f.Rule + ": " + f.Detail
		if f.Limitation != "" {
			s += " (limitation)"
		}
		parts = append(parts, s)
	}
	return cmp.Or(strings.Join(parts, "; "), "—")
}

func callAt(call *int) string {
	if call == nil {
		return ""
	}
	return fmt.Sprintf(" (call %d)", *call)
}

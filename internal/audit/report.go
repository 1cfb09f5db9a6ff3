package audit

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// WriteText prints the verdict: a PASS line with counts and the claims,
// or a FAIL line and one line per failure; then any notes.
func (r *Report) WriteText(w io.Writer) error {
	p := &printer{w: w}
	if r.Summary != "" {
		p.f("%s\n", r.Summary)
	}
	if r.Pass {
		var ran []string
		if r.Stores > 0 || len(r.Targets) == 0 {
			ran = append(ran, fmt.Sprintf("%s (%s × %s), %s", plural(r.Runs, "run"), plural(r.Cases, "case"), plural(r.Stores, "store"), plural(r.Calls, "call")))
		}
		if len(r.Targets) > 0 {
			ran = append(ran, r.targetsText())
		}
		p.f("PASS: %s, %s; %s and %s verified%s%s\n", strings.Join(ran, ", "), plural(r.Checks, "check"),
			plural(r.Files, "file"), plural(r.Sources, "source"),
			joinAfter("; experiments checked: ", r.Experiments, ", "), joinAfter("; partial: ", r.Subset, "; "))
		for _, h := range claimHeads { // claims.go
			if list := *r.list(h.kind); len(list) > 0 {
				p.f("%s\n", h.head)
				for _, c := range list {
					p.f("  - %s\n", c.Text)
				}
			}
		}
	} else {
		p.f("FAIL: %s\n", plural(len(r.Failures), "check"))
		for _, f := range r.Failures {
			p.f("%s\n", f.Message)
		}
	}
	for _, n := range r.Notes {
		p.f("note: %s\n", n)
	}
	return p.err
}

// WriteJSON prints the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error { return writeJSON(w, r) }

// writeJSON writes v as marshalEvidence encodes it.
func writeJSON(w io.Writer, v any) error {
	data, err := marshalEvidence(v)
	if err == nil {
		_, err = w.Write(data)
	}
	return err
}

// printer writes formatted text to w, keeping the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// targetsText counts the runs on targets for the PASS line.
func (r *Report) targetsText() string {
	var more []string
	if r.TargetsNotRun > 0 {
		more = append(more, fmt.Sprintf("%d not run", r.TargetsNotRun))
	}
	if r.TargetsSkipped > 0 {
		more = append(more, fmt.Sprintf("%d skipped", r.TargetsSkipped))
	}
	return fmt.Sprintf("%s on %s (%s%s), %s", plural(r.TargetRuns, "target run"), plural(len(r.Targets), "target"),
		strings.Join(r.Targets, ", "), joinAfter("; ", more, ", "), plural(r.TargetCalls, "call"))
}

// joinAfter is prefix and list joined by sep; "" for an empty list.
func joinAfter(prefix string, list []string, sep string) string {
	if len(list) == 0 {
		return ""
	}
	return prefix + strings.Join(list, sep)
}

// deriveReport judges every selected run on a store against its case's
// expectation and writes REPORT.md from the verdicts ("matches": the run
// showed what its case expects, which may be a duplicate, the case's
// lesson). Without every selected run the run-set check has failed and
// nothing whole is rendered; a selection with no case on a store has no
// REPORT.md, whatever -case or -store narrow.
func (a *auditor) deriveReport(results map[string]any) {
	if !a.slice.Whole() || len(a.selCases) == 0 || len(a.selStores) == 0 {
		return // a slice is judged once merged; no case on a store, no REPORT.md
	}
	runs := map[runKey]map[string]any{}
	arr, _ := results["runs"].([]any)
	for _, r := range arr {
		if _, dup := runs[runKeyOf(r)]; !dup {
			runs[runKeyOf(r)], _ = r.(map[string]any)
		}
	}
	verdicts := map[runKey][]mismatch{}
	for _, c := range a.selCases {
		for _, s := range a.selStores {
			run, ok := runs[runKey{c.Name, s}]
			exp, hasExp := c.Expect[s]
			if !ok || !hasExp {
				a.note("REPORT.md not derived: results.json lacks a selected run, or a case file an expectation for it")
				return
			}
			found, _ := mismatches(exp, run)
			verdicts[runKey{c.Name, s}] = found
			a.storeVerdicts = append(a.storeVerdicts, storeVerdict{Case: c.Name, Store: s, Matches: len(found) == 0, Mismatches: mismatchLines(found),
				applied: gridCell(run["counter"], run["ledger_counter"])})
		}
	}
	a.claim("report")
	a.emit(ReportFile, reportText(a.selCases, a.selStores, runs, verdicts))
}

// mismatchLines words a run's mismatches, one line each.
func mismatchLines(ms []mismatch) []string {
	out := []string{}
	for _, m := range ms {
		line := m.String()
		if m.call != nil {
			line = fmt.Sprintf("call %d: %s", *m.call, line)
		}
		out = append(out, line)
	}
	return out
}

// verdictWord is REPORT.md's word for a run that matches its case's
// expectation, or not.
func verdictWord(matches bool) string {
	if matches {
		return "matches"
	}
	return "MISMATCH"
}

// reportLegend says what a cell of REPORT.md's tables means.
const reportLegend = `In each cell the number is the **effects applied**: the counter the server
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

// gridCell is a run's number in REPORT.md's grid: the counter or "ledger N".
func gridCell(counter, ledger any) string {
	if ledger != nil {
		return "ledger " + render(ledger)
	}
	return render(counter)
}

// effectsText is a run's effects in REPORT.md's rows and headings.
func effectsText(counter, ledger any) string {
	if ledger != nil {
		return fmt.Sprintf("ledger %s, upstream %s effects applied", render(ledger), render(counter))
	}
	return render(counter) + " effects applied"
}

// reportText renders REPORT.md. It holds no time, host or commit: the
// same observations give the same bytes at any commit.
func reportText(cases []*Case, stores []string, runs map[runKey]map[string]any, verdicts map[runKey][]mismatch) []byte {
	var b strings.Builder
	n, matching := len(cases)*len(stores), 0
	for _, ms := range verdicts {
		if len(ms) == 0 {
			matching++
		}
	}
	fmt.Fprintf(&b, "# idemlab report\n\n%d runs (%d cases × %d stores): %d match their case's expectation, %d do not, as the audit judged them from results.json and the case files.\n\n",
		n, len(cases), len(stores), matching, n-matching)
	b.WriteString(reportLegend)
	b.WriteString("\n| case |")
	for _, s := range stores {
		fmt.Fprintf(&b, " %s: effects applied, verdict |", s)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(stores)) + "\n")
	for _, c := range cases {
		fmt.Fprintf(&b, "| %s |", c.Name)
		for _, s := range stores {
			k := runKey{c.Name, s}
			fmt.Fprintf(&b, " %s, %s |", gridCell(runs[k]["counter"], runs[k]["ledger_counter"]), verdictWord(len(verdicts[k]) == 0))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| case | store | expected | observed | verdict |\n|---|---|---|---|---|\n")
	for _, c := range cases {
		for _, s := range stores {
			k := runKey{c.Name, s}
			x, run := c.Expect[s], runs[k]
			codes, _ := run["exit_codes"].([]any)
			fmt.Fprintf(&b, "| %s | %s | %s, exits %s | %s, exits %s | %s |\n",
				c.Name, s, effectsText(x.Counter, x.Ledger), goList(x.ExitCodes), effectsText(run["counter"], run["ledger_counter"]), goList(codes), verdictWord(len(verdicts[k]) == 0))
		}
	}
	for _, c := range cases {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", mdText(c.Name), mdText(c.Summary))
		for _, s := range stores {
			k := runKey{c.Name, s}
			run := runs[k]
			fmt.Fprintf(&b, "\n### %s: %s, %s\n\n", s, effectsText(run["counter"], run["ledger_counter"]), verdictWord(len(verdicts[k]) == 0))
			for _, line := range mismatchLines(verdicts[k]) {
				fmt.Fprintf(&b, "- %s\n", mdText(line))
			}
			if len(verdicts[k]) > 0 {
				b.WriteString("\n")
			}
			calls, _ := run["calls"].([]any)
			callTable(&b, calls)
		}
	}
	return []byte(b.String())
}

// goList prints a list of JSON integers as Go prints an []int: [23 0].
func goList(v []any) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = render(x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// The audit renders what a target controls (its summary, versions,
// runtime line, reply bodies, header values, keys, findings quoting them,
// reasons) through one escaping function per output context: mdText for
// Markdown inline text, mdCode for a Markdown code span on a line, mdCell
// for a table cell, xmlText for SVG text and attributes (chaossvg.go),
// oneLine for a line of plain text (JUnit's system-out). Each writes a
// control character, a line or paragraph separator or a bidirectional
// control as a visible escape (visible), so that no value starts a line.

// visible is the visible escape of a rune no rendered line may hold: a C0
// or C1 control character, DEL, U+2028 and U+2029, and the bidirectional
// controls, written as Go writes them (\n, \r, \t, \u001b); "" for any
// other rune.
func visible(r rune) string {
	switch r {
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	if r < 0x20 || r >= 0x7f && r < 0xa0 || r == '\u2028' || r == '\u2029' || r == '\u061c' ||
		r == '\u200e' || r == '\u200f' || r >= '\u202a' && r <= '\u202e' || r >= '\u2066' && r <= '\u2069' {
		return fmt.Sprintf(`\u%04x`, r)
	}
	return ""
}

// escapeRunes writes s rune by rune: visible's escape for a rune that
// has one, else more's for the rune at byte i (more nil or "": the rune
// itself); a byte that is not UTF-8 as \xNN.
func escapeRunes(s string, more func(s string, i int, r rune) string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case visible(r) != "":
			b.WriteString(visible(r))
		case more != nil && more(s, i, r) != "":
			b.WriteString(more(s, i, r))
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// oneLine is s on one line of plain text, its controls made visible.
func oneLine(s string) string { return escapeRunes(s, nil) }

// mdText makes s Markdown inline text, on a line or in a table cell, that
// reads as s: no line break, no bar splitting a cell, no code span, link,
// emphasis or raw HTML or entity, and at its start no heading, list,
// quote, fence, rule or indented code. The escapes are backslashes before
// ASCII punctuation and HTML's character references, so that s shows as
// it is; a backslash is escaped only where it would escape what follows,
// an ampersand only where it could start a reference, and an underscore
// inside a word, which cannot emphasise, is kept.
func mdText(s string) string {
	return escapeRunes(s, func(s string, i int, r rune) string {
		switch r {
		case '\\': // it escapes ASCII punctuation, a visible escape, or what follows s
			if next, _ := utf8.DecodeRuneInString(s[i+1:]); i+1 == len(s) || asciiPunct(next) || visible(next) != "" || next == utf8.RuneError {
				return `\\`
			}
		case '`', '*', '[', ']', '|', '~':
			return `\` + string(r)
		case '<':
			return "&lt;"
		case '>':
			return "&gt;"
		case '&': // where it could start a character reference, with what follows s too
			if i+1 == len(s) || s[i+1] == '#' || 'a' <= s[i+1]|0x20 && s[i+1]|0x20 <= 'z' {
				return "&amp;"
			}
		case '_':
			before, _ := utf8.DecodeLastRuneInString(s[:i])
			after, _ := utf8.DecodeRuneInString(s[i+1:])
			if !wordRune(before) || !wordRune(after) {
				return `\_`
			}
		case '#', '-', '+', '=':
			if i == 0 {
				return `\` + string(r)
			}
		case ' ':
			if i == 0 {
				return "&#32;"
			}
		case '.', ')': // an ordered list's marker: 1 to 9 digits at the start, then a space or the end
			if i > 0 && i <= 9 && strings.Trim(s[:i], "0123456789") == "" && (i+1 == len(s) || s[i+1] == ' ') {
				return `\` + string(r)
			}
		}
		return ""
	})
}

// asciiPunct reports whether a backslash escapes r in Markdown.
func asciiPunct(r rune) bool {
	return r < utf8.RuneSelf && strings.ContainsRune("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", r)
}

// wordRune reports whether r is a letter or digit (an underscore between
// two cannot open or close emphasis).
func wordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// mdCode is s as one Markdown code span on a line: its controls visible,
// fenced by one backquote more than its longest run of them (padded with
// a space where it starts or ends with one, or with a space at both ends),
// so that nothing in it is read as Markdown or HTML. Not for a table cell
// (mdCell).
func mdCode(s string) string {
	s = oneLine(s)
	longest := 0
	for run := range strings.FieldsFuncSeq(s, func(r rune) bool { return r != '`' }) {
		longest = max(longest, len(run))
	}
	fence, pad := strings.Repeat("`", longest+1), ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") ||
		len(s) >= 2 && s[0] == ' ' && s[len(s)-1] == ' ' && strings.Trim(s, " ") != "" {
		pad = " "
	}
	return fence + pad + s + pad + fence
}

// mdCell prints an optional value for a Markdown table cell: a string as
// a code span whose bars are escaped (GFM splits a row's cells before it
// reads code spans, and gives an escaped bar back as a bar inside one), a
// string over 200 bytes cut to its first 40 and its length; any other
// value as its JSON, inline text.
func mdCell(v any) string {
	switch v := v.(type) {
	case nil:
		return "—"
	case string:
		more := ""
		if n := len(v); n > 200 { // the first 40 bytes (back to a whole character) and the length
			cut := 40
			for cut > 0 && !utf8.RuneStart(v[cut]) {
				cut--
			}
			v, more = v[:cut], fmt.Sprintf("… (%d bytes)", n)
		}
		return strings.ReplaceAll(mdCode(v), "|", `\|`) + more
	}
	return mdText(render(v))
}

// checkExpectations compares every run checked in depth with its case's
// expectation (mismatches).
func (a *auditor) checkExpectations(runs map[runKey]map[string]any) {
	for _, c := range a.cases {
		for _, s := range a.stores {
			exp, ok := c.Expect[s]
			run, ran := runs[runKey{c.Name, s}]
			if !ok || !ran {
				continue // reported by the run-set check
			}
			found, compared := mismatches(exp, run)
			a.report.Checks += compared
			for _, m := range found {
				at := fmt.Sprintf("case %s, store %s", c.Name, s)
				if m.call != nil {
					at = fmt.Sprintf("%s, call %d", at, *m.call)
				}
				a.fail(Failure{Check: CheckExpectation, Case: c.Name, Store: s, Call: m.call,
					Field: m.field, Expected: m.expected, Observed: m.observed, Message: fmt.Sprintf("%s: %s", at, m)})
			}
		}
	}
}

// A mismatch is one way a run differs from its case's expectation.
type mismatch struct {
	call                      *int // nil: about the whole run
	field, expected, observed string
}

// String is the mismatch as REPORT.md and a failure line word it.
func (m mismatch) String() string {
	return fmt.Sprintf("%s: expected %s, observed %s", m.field, m.expected, m.observed)
}

// mismatches compares run with exp: the counter, the ledger's counter
// where either has one, the exit codes, the number of calls and every
// field the case file gives for each call; it counts the comparisons.
func mismatches(exp *Expectation, run map[string]any) (out []mismatch, compared int) {
	cmp := func(call *int, field string, want, got any) {
		compared++
		if w, g := render(want), render(got); w != g {
			out = append(out, mismatch{call, field, clipValue(w), clipValue(g)})
		}
	}
	cmp(nil, "counter", exp.Counter, run["counter"])
	if exp.Ledger != nil || run["ledger_counter"] != nil {
		cmp(nil, "ledger_counter", exp.Ledger, run["ledger_counter"])
	}
	cmp(nil, "exit_codes", orEmpty(exp.ExitCodes), run["exit_codes"])
	calls, _ := run["calls"].([]any)
	cmp(nil, "calls", len(exp.Calls), len(calls))
	for i, ec := range exp.Calls {
		if i >= len(calls) {
			break
		}
		observed, _ := calls[i].(map[string]any)
		for _, f := range ec {
			cmp(&i, f.Name, f.Value, observed[f.Name])
		}
	}
	return out, compared
}

// clipValue shortens a rendered value for a failure line: evidence can
// hold a string of megabytes, and a verdict line need not repeat it.
func clipValue(s string) string {
	const limit = 200
	if len(s) <= limit {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:limit], len(s))
}

// summaryText is what audit -write prints before its verdict: verdicts.json
// in words. A reason a target's folder or output can put words in is
// printed oneLine: no escape sequence reaches the terminal, no line break
// forges a line.
func (a *auditor) summaryText() string {
	var b strings.Builder
	a.storesSummary(&b)
	for _, t := range a.targetVerdicts {
		fmt.Fprintf(&b, "\ntarget %s", t.Target)
		if t.Skipped != "" {
			fmt.Fprintf(&b, ": skipped: %s\n", oneLine(t.Skipped))
			continue
		}
		b.WriteString(": effects (sound), safety, rules\n")
		for _, r := range t.Runs {
			if r.NotRun != "" {
				fmt.Fprintf(&b, "  %-42s not run: %s\n", r.Case, oneLine(r.NotRun))
				continue
			}
			line := fmt.Sprintf("  %-42s %d (%d)  %s", r.Case, r.Effects, r.SoundEffects, r.Safety)
			if rules := distinctRules(slices.Concat(r.Findings, r.Deviations)); rules != "—" {
				line += "  " + rules
			}
			if len(r.Mirror) > 0 {
				line += fmt.Sprintf("  DIFFERS from the native run (%d)", len(r.Mirror))
			}
			b.WriteString(line + "\n")
		}
	}
	for _, c := range a.chaosVerdicts {
		what := chaosSubject{store: c.Store, target: c.Target, trial: c.Trial}.String()
		if c.NotRun != "" {
			fmt.Fprintf(&b, "\nchaos on %s: not run: %s\n", what, oneLine(c.NotRun))
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
		var armed, fired int64
		for _, f := range c.SinkFaults {
			armed, fired = armed+f.Armed, fired+f.Fired
		}
		if armed > 0 {
			verdict += fmt.Sprintf("; faults armed at the sink fired in %d of %d attempts", fired, armed)
		}
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
			fmt.Fprintf(b, "  %-20s", fmt.Sprintf("%8s  %s", v.applied, verdictWord(v.Matches)))
		}
		b.WriteString("\n")
	}
}

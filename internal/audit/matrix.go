package audit

import (
	"fmt"
	"slices"
	"strings"
)

// The matrix: every target against the properties a user asks about, one
// glance. A safety column is the runs of the cases whose target section
// names it (its "column"); a conformance column is the runs of the cases
// that test its rules. Both render from the verdicts TARGETS.md shows.
const (
	MatrixFile    = "MATRIX.md"
	MatrixSVGFile = "matrix.svg"
)

// A matrixColumn is one column: its title, and the runs it holds.
type matrixColumn struct {
	title  string
	safety bool     // a safety column: the worst verdict of its runs
	cases  []string // a safety column's cases, in case order
	rules  []string // a conformance column's rules (a run deviates on any)
	stuck  bool     // the safety column of stuck keys: every run, by its stuck_key findings
}

// conformanceColumns are the draft's codes and the marker, by rule.
var conformanceColumns = []matrixColumn{
	{title: "422 for another body", rules: []string{"conflict_status"}},
	{title: "409 + Retry-After in flight", rules: []string{"in_flight_status", "retry_after"}},
	{title: "400 for a bad key", rules: []string{"malformed_key"}},
	{title: "replay marker", rules: []string{"replay_marker"}},
}

// matrixColumns are the safety columns in the order of the cases that
// name them, then the stuck keys, then the conformance columns.
func matrixColumns(cases []*Case) []matrixColumn {
	var cols []matrixColumn
	for _, c := range cases {
		if c.Column == "" {
			continue
		}
		i := slices.IndexFunc(cols, func(m matrixColumn) bool { return m.title == c.Column })
		if i < 0 {
			cols = append(cols, matrixColumn{title: c.Column, safety: true})
			i = len(cols) - 1
		}
		cols[i].cases = append(cols[i].cases, c.Name)
	}
	cols = append(cols, matrixColumn{title: "key stuck after a failure", safety: true, stuck: true})
	return append(cols, conformanceColumns...)
}

// A matrixCell is one target's runs in one column, judged: a case's every
// trial is a run.
type matrixCell struct {
	word   string // pass, limitation, violation; ok or deviates; not run
	shown  int    // the runs that show word
	runs   int    // the runs judged in the column
	anchor string // the TARGETS.md run section of the first run that shows word
}

// cell judges target t's runs in column col; tests gives each case's rules.
func (col matrixColumn) cell(t *targetView, tests map[string][]string) matrixCell {
	var in []runView
	tested := false
	for _, r := range trialsOf(t.runs) {
		if r.NotRun != "" {
			continue
		}
		switch {
		case col.stuck, col.safety && slices.Contains(col.cases, r.Case):
			in = append(in, r)
		case !col.safety && slices.ContainsFunc(col.rules, func(rule string) bool { return slices.Contains(tests[r.Case], rule) }):
			tested = true
			// A run that broke safety says nothing of the code a sound
			// one answers (Fiber replays another body: no 422 to judge).
			if r.Safety != "violation" || col.wordOf(r) == "deviates" {
				in = append(in, r)
			}
		}
	}
	switch {
	case len(in) == 0 && tested:
		return matrixCell{word: "n/a"}
	case len(in) == 0:
		return matrixCell{word: "not run"}
	}
	worst := "pass"
	if !col.safety {
		worst = "ok"
	}
	for _, r := range in {
		if w := col.wordOf(r); matrixRank(w) > matrixRank(worst) {
			worst = w
		}
	}
	c := matrixCell{word: worst, runs: len(in)}
	for _, r := range in {
		if col.wordOf(r) == worst {
			if c.shown++; c.anchor == "" {
				c.anchor = runAnchor(t.name, r.Case)
			}
		}
	}
	return c
}

// trialsOf is every trial of runs, case by case: a matrix cell counts trials.
func trialsOf(runs []runView) []runView {
	var out []runView
	for _, r := range runs {
		out = append(out, r.all()...)
	}
	return out
}

// wordOf is one run's word in the column.
func (col matrixColumn) wordOf(r runView) string {
	switch {
	case col.stuck:
		word := "pass"
		for _, f := range r.Findings {
			if f.Rule == "stuck_key" && f.Limitation == "" {
				return "violation"
			} else if f.Rule == "stuck_key" {
				word = "limitation"
			}
		}
		return word
	case col.safety:
		return r.Safety
	}
	if slices.ContainsFunc(r.Deviations, func(f finding) bool { return slices.Contains(col.rules, f.Rule) }) {
		return "deviates"
	}
	return "ok"
}

// matrixRank orders the words from best to worst.
func matrixRank(word string) int {
	return slices.Index([]string{"ok", "pass", "limitation", "deviates", "violation"}, word)
}

// runAnchor is the id of a run's section in TARGETS.md.
func runAnchor(target, cs string) string { return target + "--" + cs }

// targetsLink is the address of the section id of TARGETS.md, the id
// percent-encoded but for the letters, digits and -._~ (a name the schema
// allows is unchanged), so that no value ends a link or an attribute.
func targetsLink(id string) string {
	var b strings.Builder
	b.WriteString(TargetsReportFile + "#")
	for i := range len(id) {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("-._~", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// text is the cell as MATRIX.md shows it.
func (c matrixCell) text() string {
	switch c.word {
	case "not run", "n/a":
		return c.word
	case "violation":
		return fmt.Sprintf("**violation** %d/%d", c.shown, c.runs)
	}
	return fmt.Sprintf("%s %d/%d", c.word, c.shown, c.runs)
}

// matrixOf judges every target that ran in every column.
func matrixOf(views []*targetView, cases []*Case) ([]matrixColumn, [][]matrixCell, []*targetView) {
	tests := map[string][]string{}
	for _, c := range cases {
		tests[c.Name] = c.Tests
	}
	cols := matrixColumns(cases)
	var rows []*targetView
	var cells [][]matrixCell
	for _, t := range views {
		if t.skipped != "" {
			continue
		}
		row := make([]matrixCell, len(cols))
		for i, col := range cols {
			row[i] = col.cell(t, tests)
		}
		rows, cells = append(rows, t), append(cells, row)
	}
	return cols, cells, rows
}

const matrixLegend = `What each target does under each fault, as the audit judged its runs
(TARGETS.md has every call; each cell links to the run it names). A
safety cell is the worst verdict among the runs of its column's cases
(each trial of a case is a run), and how many of those runs show it:
pass, limitation (a finding the target's own claims excuse, such as a
volatile store forgetting its keys on a restart) or **violation**. "key
stuck after a failure" is every run, by its stuck_key findings. A
conformance cell is the runs of the cases that test its rules that kept
safety: ok, or deviates; n/a where every such run broke safety (a target
that replays another body answers no 422 to judge). not run: no case of
the column could run on the target (TARGETS.md says why). matrix.svg
draws the same.
`

// matrixReport renders MATRIX.md.
func matrixReport(views []*targetView, cases []*Case) []byte {
	cols, cells, rows := matrixOf(views, cases)
	var b strings.Builder
	b.WriteString("# idemlab matrix\n\n" + matrixLegend + "\n| target |")
	for _, col := range cols {
		b.WriteString(" " + mdText(col.title) + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for i, t := range rows {
		fmt.Fprintf(&b, "| [%s](%s) |", mdText(t.name), targetsLink(t.name))
		for _, c := range cells[i] {
			if c.anchor == "" {
				b.WriteString(" " + c.text() + " |")
				continue
			}
			fmt.Fprintf(&b, " [%s](%s) |", c.text(), targetsLink(c.anchor))
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// matrixColours colour each word: green, amber, red; grey for not run.
var matrixColours = map[string]string{
	"pass": "#2e7d32", "ok": "#2e7d32", "limitation": "#f9a825", "deviates": "#f9a825",
	"violation": "#c62828", "not run": "#bdbdbd", "n/a": "#e0e0e0",
}

// matrixSVG draws MATRIX.md's table: a coloured cell per (target, column)
// with its word and rate, each a link to its run in TARGETS.md.
func matrixSVG(views []*targetView, cases []*Case) []byte {
	cols, cells, rows := matrixOf(views, cases)
	const labelW, cellW, cellH, headH = 220, 84, 34, 150
	w, h := labelW+cellW*len(cols)+100, headH+cellH*len(rows)+10 // room for the last rotated title
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	for i, col := range cols {
		x := labelW + cellW*i + cellW/2
		fmt.Fprintf(&b, `<text transform="translate(%d,%d) rotate(-40)">%s</text>`+"\n", x, headH-6, xmlText(col.title))
	}
	for r, t := range rows {
		y := headH + cellH*r
		fmt.Fprintf(&b, `<a href="%s"><text x="4" y="%d">%s</text></a>`+"\n", xmlText(targetsLink(t.name)), y+cellH/2+4, xmlText(t.name))
		for i, c := range cells[r] {
			x := labelW + cellW*i
			rate := ""
			if c.runs > 0 {
				rate = fmt.Sprintf("%d/%d", c.shown, c.runs)
			}
			ink := "#000000"
			if c.word == "violation" || c.word == "pass" || c.word == "ok" {
				ink = "#ffffff"
			}
			cell := fmt.Sprintf(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="#ffffff"/>`+
				`<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`+
				`<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`,
				x, y, cellW, cellH, matrixColours[c.word], x+cellW/2, y+14, ink, c.word, x+cellW/2, y+27, ink, rate)
			if c.anchor != "" {
				cell = fmt.Sprintf(`<a href="%s">%s</a>`, xmlText(targetsLink(c.anchor)), cell)
			}
			b.WriteString(cell + "\n")
		}
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

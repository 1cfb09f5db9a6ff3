package audit

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// What a hostile target controls, and what the audit renders from it
// (issue 27, item 5): a summary forging a section, a fake pass row and a
// script; versions, a runtime line, a replay marker, reply bodies, keys,
// faults, header values, findings, reasons, with bars, backquotes, bare
// CRs, line separators, HTML and Markdown of their own.
const (
	hostileSummary = "x\n\n## effectserver-durable\n\n| keyed_lost_reply | 1 (1) | pass | — | — |\n<script>alert(1)</script>"
	hostileVersion = "1.0.0`<img src=x onerror=alert(1)>`"
	hostileBody    = "a|b\rc``d`<b>x</b>\u2028## y\\|z"
	hostileName    = "evil\"><script>x</script>|[a](javascript:alert(1))"
)

// hostileCalls are the calls of a run, as targets.json records them.
func hostileCalls() []any {
	return []any{
		map[string]any{"step": json.Number("0"), "key": "k|`\r<b>", "fault": "drop-reply\n| 9 | 9 |", "outcome": "reply",
			"status": json.Number("200"), "body": hostileBody, "replayed": "true\r\nSet-Cookie: <script>"},
		map[string]any{"step": json.Number("1"), "key": "`", "fault": nil, "outcome": "no_reply",
			"status": []any{"<b>|`"}, "body": "``", "replayed": true},
		map[string]any{"step": json.Number("2"), "key": "\\", "fault": "\x1b[31m", "outcome": "reply",
			"status": json.Number("200"), "body": strings.Repeat("<img src=x>|`\r", 40), "replayed": nil},
	}
}

// hostileViews are three targets: one that ran (a judged run and one not
// run), one skipped, and one whose name the schema would refuse.
func hostileViews() []*targetView {
	call := 0
	run := runView{targetRunVerdict: targetRunVerdict{Case: "keyed_lost_reply", Safety: "violation", Effects: 2, SoundEffects: 1,
		Findings: []finding{{Rule: "wrong_value", Call: &call, Detail: "answered \"<script>|\\|`\"\n## forged\r| a | b |",
			Limitation: "<b>lim</b>\r\n## l"}},
		Deviations: []finding{{Rule: "replay_marker", Detail: "**pass** [x](javascript:alert(1)) \\| <i>"}},
		Mirror:     []string{"body \"`\"\n\n## mirror <img src=x>"}},
		calls: hostileCalls()}
	notRun := runView{targetRunVerdict: targetRunVerdict{Case: "body_conflict", NotRun: "<script>|\n## n \\|\u2029x"}}
	return []*targetView{
		{name: "hostile", summary: hostileSummary, runtime: "v20\r## rt <script>\u0085",
			libraries: []any{map[string]any{"name": "lib\n## l|", "version": hostileVersion}},
			spec:      &targetSpec{replay: &[2]string{"X-Replayed\r\nSet-Cookie: a=b", "`true`<b>|"}, mirrors: "durable\n## m <b>"},
			runs:      []runView{run, notRun}},
		{name: "skipped-one", summary: "# heading\r<img src=x>", skipped: "redis\n## s <script>|"},
		{name: hostileName, summary: "1. list\t<b>", spec: &targetSpec{},
			runs: []runView{{targetRunVerdict: targetRunVerdict{Case: "unkeyed_lost_reply", Safety: "pass", Effects: 2, SoundEffects: 2},
				calls: hostileCalls()}}},
	}
}

// Ensure TARGETS.md, MATRIX.md and REPORT.md keep their structure
// whatever a target sends: a "## " heading per target (REPORT.md: per
// case), a "### " per run section, every table row the cells of its
// header, no line break but the renderer's own, no raw HTML outside code
// spans but the run anchors, no link but the matrix's own, no forged
// emphasis; and that a
// code span gives back the value, its control characters made visible.
func TestRenderingsEscapeTargetValues(t *testing.T) {
	views := hostileViews()
	i := 0
	cases := []*Case{{Name: "keyed_lost_reply", Summary: "a lost reply", Expect: map[string]*Expectation{
		"volatile": {Counter: json.Number("1"), ExitCodes: []any{json.Number("0")}}}}}
	runs := map[runKey]map[string]any{{"keyed_lost_reply", "volatile"}: {"counter": json.Number("2"),
		"exit_codes": []any{json.Number("0")}, "calls": hostileCalls()}}
	verdicts := map[runKey][]mismatch{{"keyed_lost_reply", "volatile"}: {{call: &i, field: "body",
		expected: `"1"`, observed: strings.TrimSpace(hostileSummary)}}}
	for _, tc := range []struct {
		name           string
		doc            []byte
		headings, runs int  // "## " and "### " lines
		links          bool // the matrix links to TARGETS.md
	}{
		{"TARGETS.md", targetsReport(views), len(views), 2, false},
		{"MATRIX.md", matrixReport(views, nil), 0, 0, true},
		{"REPORT.md", reportText(cases, []string{"volatile"}, runs, verdicts), len(cases), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkMarkdown(t, string(tc.doc), tc.headings, tc.runs, tc.links)
		})
	}

	// The body's cell gives back the body, its CR and line separator
	// visible; a body over 200 bytes is cut, its cell still whole.
	doc := string(targetsReport(views[:1]))
	for _, want := range []string{"a|b\\rc``d`<b>x</b>\\u2028## y\\|z", "<img src=x>|`\\r<img"} {
		if !slices.ContainsFunc(codeSpansOf(doc), func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("TARGETS.md: no code span gives back %q; spans: %q", want, codeSpansOf(doc))
		}
	}
	// The marker, in a list item, is one code span holding both halves.
	if !strings.Contains(doc, "- replay marker: ``X-Replayed\\r\\nSet-Cookie: a=b: `true`<b>|``\n") {
		t.Errorf("TARGETS.md: the replay marker line is not one code span of its header and value:\n%s", lineWith(doc, "replay marker"))
	}
}

// checkMarkdown checks doc's structure (see TestRenderingsEscapeTargetValues).
func checkMarkdown(t *testing.T, doc string, headings, runs int, links bool) {
	t.Helper()
	for i, r := range doc {
		if r == utf8.RuneError || r != '\n' && (r < 0x20 || r >= 0x7f && r < 0xa0 || r == '\u2028' || r == '\u2029') {
			t.Errorf("byte %d: %q: a control character or line separator survives", i, r)
		}
	}
	anchor := regexp.MustCompile(`^<a id="[^"<>]*"></a>$`)
	link := regexp.MustCompile(`^\]\(TARGETS\.md#[A-Za-z0-9._~%-]*\)`)
	var h2, h3, cells int
	inTable := false
	for n, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			h2++
		case strings.HasPrefix(line, "### "):
			h3++
		case strings.HasPrefix(line, "#") && n > 0:
			t.Errorf("line %d starts a heading: %q", n+1, line)
		}
		// A table: a header and its delimiter row, then rows up to a blank
		// line, each with the header's count of cell bars (a bar after a
		// backslash is escaped, in a code span too: GFM splits cells first).
		if strings.HasPrefix(line, "|") && !inTable {
			inTable, cells = true, cellBars(line)
		} else if inTable && line == "" {
			inTable = false
		} else if inTable && cellBars(line) != cells {
			t.Errorf("line %d: %d cell bars, its table's header %d: %q", n+1, cellBars(line), cells, line)
		}
		if !inTable && line != "" && strings.HasPrefix(strings.TrimLeft(line, " "), "|") {
			t.Errorf("line %d: a table row outside a table: %q", n+1, line)
		}
		if anchor.MatchString(line) {
			continue
		}
		// Outside code spans, each backslash escape read as one letter.
		out := regexp.MustCompile(`\\[!-/:-@\[-`+"`"+`{-~]`).ReplaceAllString(outsideCode(line), "E")
		if strings.ContainsAny(out, "<>") {
			t.Errorf("line %d: raw HTML outside a code span: %q", n+1, line)
		}
		for i := strings.Index(out, "]("); i >= 0; i = next(out, i, "](") {
			if !links || !link.MatchString(out[i:]) {
				t.Errorf("line %d: a link the renderer did not make: %q", n+1, line)
			}
		}
		if strings.Contains(out, "**pass**") {
			t.Errorf("line %d: a forged **pass** survives: %q", n+1, line)
		}
	}
	if h2 != headings || h3 != runs {
		t.Errorf("%d \"## \" and %d \"### \" lines, want %d and %d:\n%s", h2, h3, headings, runs, doc)
	}
}

func next(s string, i int, sub string) int {
	if j := strings.Index(s[i+1:], sub); j >= 0 {
		return i + 1 + j
	}
	return -1
}

// cellBars counts the bars of a table row that split cells.
func cellBars(line string) int {
	n := 0
	for i := range len(line) {
		if line[i] == '|' && (i == 0 || line[i-1] != '\\') {
			n++
		}
	}
	return n
}

// codeSpan finds the code spans of a line as CommonMark does: a run of n
// backquotes not escaped opens one, the next run of exactly n closes it;
// spans are the contents (one space stripped from each side when both
// have one), a table's escaped bars unescaped; rest is the line outside
// them.
func codeSpan(line string) (spans []string, rest string) {
	var out strings.Builder
	for i := 0; i < len(line); {
		switch c := line[i]; {
		case c == '\\' && i+1 < len(line):
			out.WriteString(line[i : i+2])
			i += 2
			continue
		case c != '`':
			out.WriteByte(c)
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		closeAt := -1
		for j := i + n; j < len(line); {
			if line[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(line) && line[j+m] == '`' {
				m++
			}
			if m == n {
				closeAt = j
				break
			}
			j += m
		}
		if closeAt < 0 {
			out.WriteString(line[i : i+n])
			i += n
			continue
		}
		s := line[i+n : closeAt]
		if len(s) >= 2 && s[0] == ' ' && s[len(s)-1] == ' ' && strings.Trim(s, " ") != "" {
			s = s[1 : len(s)-1]
		}
		spans = append(spans, strings.ReplaceAll(s, `\|`, "|"))
		out.WriteString("CODE")
		i = closeAt + n
	}
	return spans, out.String()
}

func outsideCode(line string) string { _, rest := codeSpan(line); return rest }

func codeSpansOf(doc string) []string {
	var all []string
	for _, line := range strings.Split(doc, "\n") {
		spans, _ := codeSpan(line)
		all = append(all, spans...)
	}
	return all
}

func lineWith(doc, sub string) string {
	for _, line := range strings.Split(doc, "\n") {
		if strings.Contains(line, sub) {
			return line
		}
	}
	return "(none)"
}

// Ensure the escaping of Markdown inline text and of a table cell's code
// span, value by value: what a value may hold stays visible, and nothing
// it holds is read as Markdown or HTML.
func TestMarkdownEscapes(t *testing.T) {
	for _, tc := range []struct{ in, text, cell string }{
		{"plain words, max_body 4096 (no body)", "plain words, max_body 4096 (no body)", "`plain words, max_body 4096 (no body)`"},
		{"a|b", `a\|b`, "`a\\|b`"},
		{`a\|b`, `a\\\|b`, "`a\\\\|b`"},
		{`C:\dir\n "q\"" end\`, `C:\dir\n "q\\"" end\\`, "`C:\\dir\\n \"q\\\"\" end\\`"},
		{"\\\n", `\\\n`, "`\\\\n`"},
		{"x\r\ny\u2028z\x00\x7f", `x\r\ny\u2028z\u0000\u007f`, "`x\\r\\ny\\u2028z\\u0000\\u007f`"},
		{"<script>&amp;&#60;& &", "&lt;script&gt;&amp;amp;&amp;#60;& &amp;", "`<script>&amp;&#60;& &`"},
		{"capacity & input", "capacity & input", "`capacity & input`"},
		{"a`b", "a\\`b", "``a`b``"},
		{"`", "\\`", "`` ` ``"},
		{"x``y`", "x\\`\\`y\\`", "``` x``y` ```"},
		{"**b** _i_ [l](u) ![i](u)", `\*\*b\*\* \_i\_ \[l\](u) !\[i\](u)`, "`**b** _i_ [l](u) ![i](u)`"},
		{"# h", `\# h`, "`# h`"},
		{"1. item", `1\. item`, "`1. item`"},
		{"- item", `\- item`, "`- item`"},
		{"~~struck~~ a~b", `\~\~struck\~\~ a\~b`, "`~~struck~~ a~b`"},
		{"    code", "&#32;   code", "`    code`"},
		{"", "", "``"},
	} {
		if got := mdText(tc.in); got != tc.text {
			t.Errorf("mdText(%q) = %q, want %q", tc.in, got, tc.text)
		}
		if got := mdCell(tc.in); got != tc.cell {
			t.Errorf("mdCell(%q) = %q, want %q", tc.in, got, tc.cell)
		}
	}
}

// Ensure matrix.svg and a chaos timeline are well-formed XML whatever a
// name or key holds: no element or attribute but the drawing's, every
// link to TARGETS.md, no control character.
func TestSVGEscapesTargetValues(t *testing.T) {
	h := &chaosHistory{target: hostileName, replicas: 1, clients: 1, endUS: 1000}
	marks := []tlMark{{rule: "duplicate", intent: 1, key: "k\x1b[31m<script>\r\n\"'&", promised: true, values: []int64{1, 2}}}
	chaos := newTimeline(h, chaosCheck{counts: map[string]int64{}, markCount: 1, marks: marks}).svg()
	for _, tc := range []struct {
		name string
		doc  []byte
	}{
		{"matrix.svg", matrixSVG(hostileViews(), nil)},
		{"chaos timeline", chaos},
	} {
		t.Run(tc.name, func(t *testing.T) {
			elements := map[string]bool{"svg": true, "rect": true, "text": true, "tspan": true, "a": true, "line": true, "g": true}
			d := xml.NewDecoder(bytes.NewReader(tc.doc))
			for {
				tok, err := d.Token()
				if errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatalf("not well-formed XML: %v\n%s", err, tc.doc)
				}
				switch tok := tok.(type) {
				case xml.StartElement:
					if !elements[tok.Name.Local] {
						t.Errorf("element %s: not the drawing's", tok.Name.Local)
					}
					for _, a := range tok.Attr {
						if a.Name.Local == "href" && !strings.HasPrefix(a.Value, TargetsReportFile+"#") || strings.HasPrefix(a.Name.Local, "on") {
							t.Errorf("attribute %s=%q: not the drawing's", a.Name.Local, a.Value)
						}
					}
				case xml.CharData:
					if strings.ContainsFunc(string(tok), func(r rune) bool { return r < 0x20 && r != '\n' }) {
						t.Errorf("text %q: a control character survives", tok)
					}
				}
			}
		})
	}
}

// Ensure the JUnit report reads back whatever a finding, a reason or a
// key holds: well-formed, each finding on one line of system-out, no
// control character but a line's end.
func TestJUnitEscapesTargetValues(t *testing.T) {
	call := 1
	r := &Report{verdicts: &verdictsDoc{Targets: []targetVerdict{
		{Target: "t", Runs: []targetRunVerdict{
			{Case: "keyed_lost_reply", Safety: "violation", Effects: 2, SoundEffects: 1,
				Findings:   []finding{{Rule: "wrong_value", Call: &call, Detail: "answered \"x\"\nviolation forged\x1b[2J\x00", Limitation: "a\nb"}},
				Deviations: []finding{{Rule: "replay_marker", Detail: "no marker\r\nconformance forged"}},
				Mirror:     []string{"differs\u2028mirror: forged"}},
			{Case: "body_conflict", NotRun: "not\nrun\x07"},
		}},
		{Target: "s", Skipped: "gone\r\n\x1b"},
	}, Chaos: []ChaosVerdict{{Target: "t", Violations: 1, Rules: []ChaosRuleVerdict{{"duplicate", true, 1}},
		Findings: []ChaosFinding{{Rule: "duplicate", Intent: 1, Key: "k\n\x1b", Detail: "twice\nduplicate forged"}}}}},
		caseSummaries: map[string]string{"keyed_lost_reply": "a lost reply"}}
	data, err := r.JUnit(false)
	if err != nil {
		t.Fatal(err)
	}
	tests := ingest(t, data)
	for name, lines := range map[string]int{
		"target t / keyed_lost_reply": 5, // summary, safety, the finding, the deviation, the mirror
		"target t / chaos":            2, // the rule, the finding
	} {
		out := strings.TrimSuffix(tests[name].SystemOut, "\n")
		if got := strings.Count(out, "\n") + 1; got != lines {
			t.Errorf("%s: system-out has %d lines, want %d:\n%s", name, got, lines, out)
		}
	}
	for i, r := range string(data) {
		if r == utf8.RuneError || r != '\n' && (r < 0x20 || r >= 0x7f && r < 0xa0 || r == '\u2028' || r == '\u2029') {
			t.Errorf("byte %d: %q survives in the report", i, r)
		}
	}
}

// Ensure what audit -write prints of the verdicts carries no terminal
// escape and no forged line from a reason a target put words in.
func TestSummaryTextOneLine(t *testing.T) {
	hostile := "redis-server not found\x1b[2J\x1b[31m\nPASS: everything\r"
	a := &auditor{
		targetVerdicts: []targetVerdict{
			{Target: "gone", Skipped: hostile},
			{Target: "t", Runs: []targetRunVerdict{{Case: "c", NotRun: hostile}}},
		},
		chaosVerdicts: []ChaosVerdict{{Target: "t", NotRun: hostile}},
	}
	out := a.summaryText()
	if strings.ContainsAny(out, "\x1b\r") {
		t.Errorf("summary carries an escape or a CR: %q", out)
	}
	if strings.Contains(out, "\nPASS: everything") {
		t.Errorf("a reason forged a line of its own: %q", out)
	}
	if n := strings.Count(out, "redis-server not found"); n != 3 {
		t.Errorf("the reason shows %d times, want 3 (skipped, not run, chaos not run): %q", n, out)
	}
}

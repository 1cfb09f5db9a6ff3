package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/audit/strict"
)

// The audit's worst cases: each an evidence file at its caps (bytes and
// values, read.go), shaped to cost the audit the most memory per byte.
// TestWorstCases checks the audit's verdict on each JSON one, and
// TestChaosHistoryShapes the checker's on each history shape; with
// -worstcase.out DIR, TestWorstCases also writes every case at full size
// into DIR (about 2.5 GB), each a copy of -worstcase.base (by default the
// checkout's evidence/) with its files replaced and manifest.files
// updated: testdata/worstcase.sh then measures the audit on each with
// /usr/bin/time -v.
var (
	worstCaseOut  = flag.String("worstcase.out", "", "also write every worst-case evidence folder, at full size, into this folder")
	worstCaseBase = flag.String("worstcase.base", filepath.Join("..", "..", "evidence"), "the evidence folder the cases written by -worstcase.out copy")
)

// A worstCase is evidence files replaced by hostile ones.
type worstCase struct {
	name  string
	files map[string]func(w io.Writer) error // evidence file -> its writer
	want  string                             // the audit prints a line holding this; "": only measured (histories: see TestChaosHistoryShapes)
}

// nestedChain is a chain of depth objects {"":{"":...{}...}}: five
// bytes an object, the densest a JSON document holds objects.
func nestedChain(depth int) string {
	return strings.Repeat(`{"":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// jsonAtCaps writes a JSON document at its caps: prefix (holding
// prefixUnits of what limit counts, values or objects), then elem
// (holding elemUnits) repeated, comma-separated, while the document stays
// within limit, then one string as long as the document needs to be size
// bytes (an element of one unit, or, with a filler, inside it), then
// suffix.
func jsonAtCaps(size int64, limit int, prefix string, prefixUnits int, elem string, elemUnits int, suffix string) func(w io.Writer) error {
	return jsonFilled(size, limit, prefix, prefixUnits, elem, elemUnits, filler{units: 1}, suffix)
}

// A filler is where the string that fills a document goes: between pre
// and post, together units of what the cap counts.
type filler struct {
	pre, post string
	units     int
}

func jsonFilled(size int64, limit int, prefix string, prefixUnits int, elem string, elemUnits int, fill filler, suffix string) func(w io.Writer) error {
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		fixed := int64(len(prefix) + len(suffix) + len(fill.pre) + len(fill.post) + 2) // 2: the string's quotes
		n, units := fixed, prefixUnits
		bw.WriteString(prefix)
		for units+elemUnits+fill.units <= limit && n+int64(len(elem))+1 <= size {
			bw.WriteString(elem)
			bw.WriteByte(',')
			n += int64(len(elem)) + 1
			units += elemUnits
		}
		bw.WriteString(fill.pre + `"` + strings.Repeat("a", int(size-n)) + `"` + fill.post)
		bw.WriteString(suffix)
		return bw.Flush()
	}
}

// plainBytes writes size bytes of one repeated line (a REPORT.md or an
// SVG the audit compares byte for byte with its own), cut where size
// ends; a chunk of whole lines at a time.
func plainBytes(size int64, line string) func(w io.Writer) error {
	return func(w io.Writer) error {
		chunk := []byte(strings.Repeat(line, max(1, (1<<20)/len(line))))
		for n := int64(0); n < size; {
			k := min(int64(len(chunk)), size-n)
			if _, err := w.Write(chunk[:k]); err != nil {
				return err
			}
			n += k
		}
		return nil
	}
}

// historyWriter writes a chaos history of at most size bytes: a header
// and a place line whose counts are known only at the end are written as
// placeholders (padded with spaces, which a JSON line may hold) and
// filled in then.
type historyWriter struct {
	buf            bytes.Buffer
	size           int64
	header, place  int // offsets of the placeholders
	attempts       int
	events, places int
	effects        int
}

const placeholder = 400 // bytes a placeholder line takes, newline included

func (h *historyWriter) reserve() int {
	off := h.buf.Len()
	h.buf.WriteString(strings.Repeat(" ", placeholder-1) + "\n")
	return off
}

// room reports whether a line of n bytes fits, keeping the bytes a place
// line and its closing need.
func (h *historyWriter) room(n int) bool { return int64(h.buf.Len()+n+1+placeholder) <= h.size }

func (h *historyWriter) line(s string) { h.buf.WriteString(s + "\n") }

func (h *historyWriter) fill(off int, s string) {
	copy(h.buf.Bytes()[off:off+placeholder-1], s)
}

// shaOf is a made-up body digest for intent n (hex).
func shaOf(n int) string {
	s := sha256.Sum256([]byte(fmt.Sprint("worst ", n)))
	return hex.EncodeToString(s[:])
}

func attemptLine(n, attempt int, sha, typ, outcome string, status int, value string, start int) string {
	replayed := "null"
	if typ == "ok" {
		replayed = "false"
	}
	return fmt.Sprintf(`{"kind":"attempt","intent":%d,"key":"k%d","body_sha256":"%s","client":0,"replica":0,"attempt":%d,"phase":"chaos","start_us":%d,"end_us":%d,"fault":"","type":"%s","outcome":"%s","status":%d,"value":"%s","replayed":%s,"error":""}`,
		n, n, sha, attempt, start, start+1, typ, outcome, status, value, replayed)
}

// chaosHistoryOf writes a history of store of at most size bytes (one
// replica, one place): body writes the attempt and event lines, then
// effects the effect lines, each while the history has room.
func chaosHistoryOf(size int64, store string, body func(h *historyWriter), effects func(h *historyWriter)) func(w io.Writer) error {
	return func(w io.Writer) error {
		h := &historyWriter{size: size}
		h.buf.Grow(int(size))
		h.header = h.reserve()
		body(h)
		h.place = h.reserve()
		h.places = 1
		if effects != nil {
			effects(h)
		}
		h.fill(h.header, fmt.Sprintf(`{"kind":"run","history_version":2,"store":"%s","target":"","claims":{"durable":true,"shared_store":true},"seed":1,"replicas":1,"clients":1,`+
			`"duration_ms":1000,"kill_every_ms":-1,"faults":[],"chaos_start_us":0,"quiet_start_us":0,"attempts":%d,"server_events":%d,"places":%d}`,
			store, h.attempts, h.events, h.places))
		h.fill(h.place, fmt.Sprintf(`{"kind":"place","place":0,"replicas":[0],"counter":%d,"effects":%d}`, h.effects, h.effects))
		_, err := w.Write(h.buf.Bytes())
		return err
	}
}

// The history shapes: each line valid, each costing the audit's checker
// what it keeps per line, or a finding per line.
var historyShapes = map[string]struct {
	body, effects func(h *historyWriter)
}{
	// Every line a new intent acknowledged with value 1 and never applied:
	// an intent, an acknowledgement, a lost_ack and a value_reused each.
	"acked": {body: func(h *historyWriter) {
		for n := 0; ; n++ {
			l := attemptLine(n, 0, shaOf(n), "ok", "reply", 200, "1", n)
			if !h.room(len(l)) {
				return
			}
			h.line(l)
			h.attempts++
		}
	}},
	// Every line a new intent with no reply: an intent and a stuck each.
	"stuck": {body: func(h *historyWriter) {
		for n := 0; ; n++ {
			l := attemptLine(n, 0, shaOf(n), "info", "no_reply", 0, "", n)
			if !h.room(len(l)) {
				return
			}
			h.line(l)
			h.attempts++
		}
	}},
	// Every line a server event.
	"events": {body: func(h *historyWriter) {
		for n := 0; ; n++ {
			l := fmt.Sprintf(`{"kind":"kill","replica":0,"at_us":%d,"pid":1,"addr":"","exit_code":-1,"planned":%d,"error":""}`, n, n%chaosplan.MaxKills)
			if !h.room(len(l)) {
				return
			}
			h.line(l)
			h.events++
		}
	}},
	// One intent, then every line an effect no intent sent: an
	// unknown_effect each.
	"unknown-effects": {
		body: func(h *historyWriter) {
			h.line(attemptLine(0, 0, shaOf(0), "info", "no_reply", 0, "", 0))
			h.attempts++
		},
		effects: func(h *historyWriter) {
			for v := 1; ; v++ {
				l := fmt.Sprintf(`{"kind":"effect","place":0,"value":%d,"body_sha256":"%s","key":null,"replica":null,"at_us":null,"called_us":null}`, v, shaOf(v))
				if !h.room(len(l)) {
					return
				}
				h.line(l)
				h.effects++
			}
		},
	},
	// Half the bytes acknowledgements of intent 0 with value 0, half
	// effects of intent 0: one duplicate applied on every effect line, and
	// a value_mismatch (and a value_reused) per acknowledgement, each
	// naming where the intent was applied.
	"mismatch": {
		body: func(h *historyWriter) {
			for a := 0; int64(h.buf.Len()) < h.size/2; a++ {
				h.line(attemptLine(0, a, shaOf(0), "ok", "reply", 200, "0", a))
				h.attempts++
			}
		},
		effects: func(h *historyWriter) {
			for v := 1; ; v++ {
				l := fmt.Sprintf(`{"kind":"effect","place":0,"value":%d,"body_sha256":"%s","key":null,"replica":null,"at_us":null,"called_us":null}`, v, shaOf(0))
				if !h.room(len(l)) {
					return
				}
				h.line(l)
				h.effects++
			}
		},
	},
}

// worstCases lists the worst cases, each file at its cap (a history at
// CapHistory), every JSON document shaped the costliest way for its
// size: nested objects (five bytes an object) or, to make the schema
// validator report one cause per element, an array of numbers where
// objects belong.
func worstCases() []worstCase {
	const depth = strict.MaxDepth - 2 // inside {"x":[...]}, as deep as the parser allows
	chain := nestedChain(depth)
	// nested is {"x":[...]} of chains of objects, as many as the cap of
	// objects allows (a value each but the array and the string).
	nested := func(size int64, caps jsonCap) func(io.Writer) error {
		return jsonAtCaps(size, caps.Objects, `{"x":[`, 1, chain, depth, "]}")
	}
	// invalid is an array of numbers where the schema wants objects: one
	// cause per element.
	invalid := func(size int64, caps jsonCap, prefix string, prefixValues int) func(io.Writer) error {
		return jsonAtCaps(size, caps.Values, prefix, prefixValues, "0", 1, "]}")
	}
	hist := func(shape string) func(io.Writer) error {
		s := historyShapes[shape]
		return chaosHistoryOf(CapHistory, "durable", s.body, s.effects)
	}
	const extra = `: (root): additionalProperties 'x' not allowed`
	runPrefix, resultsPrefix := `{"schema_version":1,"started_utc":"x","wall_ms":0,"parallel":1,"runs":[`, `{"schema_version":1,"runs":[`
	// Valid documents at their caps: one run of as many calls as the caps
	// allow (results: 8 values a call; run: 4 a call and a log line).
	validResults := jsonFilled(CapResults, capResultsJSON.Values,
		resultsPrefix+`{"case":"x","store":"volatile","counter":0,"exit_codes":[],"calls":[`, 9,
		`{"step":0,"key":"k","fault":null,"outcome":"reply","status":200,"body":"1","replayed":false}`, 8,
		filler{`{"step":0,"key":"k","fault":null,"outcome":"reply","status":200,"body":`, `,"replayed":false}`, 8}, `]}]}`)
	validRun := jsonAtCaps(CapRun, capRunJSON.Values,
		runPrefix+`{"case":"x","store":"volatile","wall_ms":0,"servers":[],"calls":[],"server_log":[`, 15,
		`"server 0 (replica 0): time=2026-11-30T01:49:02.944Z level=INFO msg=request method=POST path=/effect key=k fault= status=200 replayed=false outcome=reply duration=1ms"`, 1, `]}]}`)
	cases := []worstCase{
		{"run-nested", map[string]func(io.Writer) error{"run.json": nested(CapRun, capRunJSON)}, "run.json" + extra},
		// All but 100 of the schema's failures counted in one line: the
		// values but the prefix's 6 are elements, each a failure.
		{"run-invalid", map[string]func(io.Writer) error{"run.json": invalid(CapRun, capRunJSON, runPrefix, 6)},
			fmt.Sprintf("run.json: %d more schema failures", capRunJSON.Values-6-strict.MaxSchemaLines)},
		{"run-valid", map[string]func(io.Writer) error{"run.json": validRun}, "run.json: runs: expected the runs of results.json in its order"},
		{"results-nested", map[string]func(io.Writer) error{"results.json": nested(CapResults, capResultsJSON)}, "results.json" + extra},
		{"results-invalid", map[string]func(io.Writer) error{"results.json": invalid(CapResults, capResultsJSON, resultsPrefix, 3)},
			fmt.Sprintf("results.json: %d more schema failures", capResultsJSON.Values-3-strict.MaxSchemaLines)},
		{"results-valid", map[string]func(io.Writer) error{"results.json": validResults}, "case x, store volatile: unexpected run (not in manifest.selection)"},
		{"manifest-nested", map[string]func(io.Writer) error{"manifest.json": nested(CapManifest, capManifestJSON)}, "manifest.json" + extra},
		{"chaos-nested", map[string]func(io.Writer) error{ChaosFile: nested(capOf(ChaosFile), capChaosJSON)}, ChaosFile + extra},
		{"jitter-nested", map[string]func(io.Writer) error{JitterFile: nested(CapJitter, capJitterJSON)}, JitterFile + extra},
		{"retries-nested", map[string]func(io.Writer) error{RetriesFile: nested(CapRetries, capRetriesJSON)}, RetriesFile + extra},
		// The files the audit derives (derived.go) are inputs only as bytes
		// it compares with its own rendering, as a stream of at most that
		// rendering's length and one byte more: it never parses them, so
		// no JSON shape costs it more than another (no nested, values or
		// objects case for the statement or verdicts.json), only their
		// size at the cap (here) and over it (bytes-NAME, below).
		{"report-big", map[string]func(io.Writer) error{"REPORT.md": plainBytes(CapReport, "| a | b |\n")},
			`REPORT.md: differs from the audit's own rendering: line 1: expected "# idemlab report", observed "| a | b |`},
		{"svg-big", map[string]func(io.Writer) error{JitterSVGFile: plainBytes(CapSVG, "<g></g>\n")},
			`jitter.svg: differs from the audit's own rendering: line 1: expected "<svg`},
		{"statement-big", map[string]func(io.Writer) error{StatementFile: plainBytes(CapStatement, "{}\n")},
			`statement.intoto.json: differs from the audit's own rendering: line 1: expected "{", observed "{}"`},
		{"verdicts-big", map[string]func(io.Writer) error{VerdictsFile: plainBytes(CapVerdicts, "{}\n")},
			`verdicts.json: differs from the audit's own rendering: line 1: expected "{", observed "{}"`},
	}
	// The probe: documents filling their byte caps with nested
	// objects or with numbers where objects belong, far over their caps:
	// refused at the first object, or value, over.
	over := func(name, what string) string {
		limit := map[string]int{"values": jsonCaps[name].Values, "objects": jsonCaps[name].Objects}[what]
		return fmt.Sprintf("%s: over the cap of %d JSON %s", name, limit, what)
	}
	unbounded := jsonCap{Values: math.MaxInt, Objects: math.MaxInt}
	cases = append(cases,
		worstCase{"run-probe-nested", map[string]func(io.Writer) error{"run.json": nested(CapRun, unbounded)}, over("run.json", "objects")},
		worstCase{"run-probe-invalid", map[string]func(io.Writer) error{"run.json": invalid(CapRun, unbounded, runPrefix, 6)}, over("run.json", "values")},
		worstCase{"results-probe-nested", map[string]func(io.Writer) error{"results.json": nested(CapResults, unbounded)}, over("results.json", "objects")},
		worstCase{"results-probe-invalid", map[string]func(io.Writer) error{"results.json": invalid(CapResults, unbounded, resultsPrefix, 3)}, over("results.json", "values")},
	)
	// One value, or one object, over each document's caps: refused there
	// (the statement, derived, is never parsed: see above).
	for _, name := range sortedKeys(jsonCaps) {
		if derivedName(name) {
			continue
		}
		caps := jsonCaps[name]
		cases = append(cases,
			worstCase{"values-" + name, map[string]func(io.Writer) error{name: jsonAtCaps(min(capOf(name), 4*int64(caps.Values)), caps.Values+1, `{"x":[`, 2, "0", 1, "]}")},
				over(name, "values")},
			worstCase{"objects-" + name, map[string]func(io.Writer) error{name: plainBytes(3*int64(caps.Objects+1)+1, "["+strings.Repeat("{},", caps.Objects)+"{}]")},
				over(name, "objects")})
	}
	// The bytes over each cap: refused unread. TARGETS.md is no file the
	// audit derives for the fixture's selection (no target): it is refused
	// unopened.
	for _, name := range sortedKeys(fileCaps) {
		limit := fileCaps[name]
		want := fmt.Sprintf("file %s: %d bytes, over the cap of %d bytes", name, limit+1, limit)
		switch name {
		case "manifest.json":
			continue
		case TargetsReportFile:
			want = "file TARGETS.md: not listed in the manifest, and not a file the audit derives for this selection"
		}
		cases = append(cases, worstCase{"bytes-" + name, map[string]func(io.Writer) error{name: plainBytes(limit+1, " ")}, want})
	}
	for _, shape := range []string{"acked", "stuck", "events", "unknown-effects", "mismatch"} {
		cases = append(cases, worstCase{name: "history-" + shape, files: map[string]func(io.Writer) error{"chaos-durable.jsonl": hist(shape)}})
	}
	others := map[string]func(io.Writer) error{}
	for i := range extraFiles {
		others[fmt.Sprintf("other-%03d.bin", i)] = plainBytes(CapOther, "x")
	}
	cases = append(cases, worstCase{"other-files", others, "file other-000.bin: listed in the manifest, but the runner writes no such file"})
	// Every file at its caps at once, the costliest way: results.json
	// valid (kept through the checks), run.json of nested objects.
	all := map[string]func(io.Writer) error{
		"run.json": nested(CapRun, capRunJSON), "results.json": validResults,
		JitterFile: nested(CapJitter, capJitterJSON), RetriesFile: nested(CapRetries, capRetriesJSON),
		"REPORT.md": plainBytes(CapReport, "| a | b |\n"), JitterSVGFile: plainBytes(CapSVG, "<g></g>\n"),
		StatementFile: plainBytes(CapStatement, "{}\n"), VerdictsFile: plainBytes(CapVerdicts, "{}\n"),
		"chaos-durable.jsonl": hist("acked"),
	}
	for name, w := range others {
		all[name] = w
	}
	return append(cases, worstCase{name: "all", files: all})
}

// extraFiles is how many files the other-files case adds to
// manifest.files, each at CapOther (the manifest's cap would allow
// about 12,000).
const extraFiles = 100

// writeWorstCase writes into dir a copy of the evidence folder base with
// c's files written over (or beside) its own and manifest.files updated
// (the files the audit derives are never listed).
func writeWorstCase(dir, base string, c worstCase) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(base, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	sums := map[string]string{}
	for name, write := range c.files {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		h := sha256.New()
		err = write(io.MultiWriter(f, h))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		sums[name] = hex.EncodeToString(h.Sum(nil))
	}
	if _, replaced := c.files["manifest.json"]; replaced {
		return nil
	}
	mp := filepath.Join(dir, "manifest.json")
	data, err := os.ReadFile(mp)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("%s: %w", mp, err)
	}
	files, _ := m["files"].(map[string]any)
	for name, sum := range sums {
		if !derivedName(name) {
			files[name] = sum
		}
	}
	if _, ok := c.files[TargetsFile]; ok { // read only when the selection has a target
		sel, _ := m["selection"].(map[string]any)
		sel["targets"] = []any{"x"}
		m["targets"] = []any{map[string]any{"name": "x", "dir": "", "digest": strings.Repeat("0", 64), "libraries": []any{}, "runtime": "", "skipped": ""}}
	}
	if _, ok := c.files[ChaosFile]; ok { // read only when the selection has the chaos experiment
		sel, _ := m["selection"].(map[string]any)
		if exps, _ := sel["experiments"].([]any); !slices.Contains(exps, any("chaos")) {
			sel["experiments"] = append(exps, "chaos")
		}
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(mp, append(out, '\n'), 0o644)
}

// Ensure each JSON worst case, at its caps, is read whole and checked (its
// schema's failures bounded), and one value or one byte over a cap is
// refused, with the line saying so. With -worstcase.out, every case (the
// histories and "all" too) is also written at full size for
// testdata/worstcase.sh, each a copy of -worstcase.base.
func TestWorstCases(t *testing.T) {
	t.Parallel()
	f := newExperimentsFixture(t)
	for _, c := range worstCases() {
		if c.want == "" {
			continue // measured only: histories are judged by TestChaosHistoryShapes
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each case writes and audits its own folder
			dir := filepath.Join(t.TempDir(), "evidence")
			if err := writeWorstCase(dir, f.evidence, c); err != nil {
				t.Fatal(err)
			}
			r, err := Audit(Options{Root: f.root, Evidence: dir})
			var lines []string
			if err != nil {
				lines = []string{err.Error()}
			} else {
				lines = messages(r)
			}
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, c.want) }) {
				t.Errorf("no line holds %q; the audit printed:\n%s", c.want, strings.Join(lines[:min(len(lines), 20)], "\n"))
			}
		})
	}
	t.Run("case file over its cap of values", func(t *testing.T) {
		schemas, err := LoadSchemas(f.root)
		if err != nil {
			t.Fatal(err)
		}
		data := "[" + strings.Repeat("0,", capCaseJSON.Values-1) + "0]" // the array and as many numbers as the cap
		_, err = schemas.LoadCase("cases/99-big.json", []byte(data))
		if want := fmt.Sprintf("cases/99-big.json: (root): over the cap of %d JSON values", capCaseJSON.Values); err == nil || err.Error() != want {
			t.Errorf("LoadCase error = %v, want %s", err, want)
		}
	})
	if *worstCaseOut != "" {
		for _, c := range worstCases() {
			if err := writeWorstCase(filepath.Join(*worstCaseOut, c.name), *worstCaseBase, c); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
	}
}

// Ensure the checker judges each hostile history shape as it must, every
// finding counted, at most keepFindings of a rule kept, and an intent's
// effects printed within their bound.
func TestChaosHistoryShapes(t *testing.T) {
	const size = 2 << 20
	for _, tc := range []struct {
		shape string
		check func(t *testing.T, c chaosCheck)
	}{
		{"acked", func(t *testing.T, c chaosCheck) {
			n := c.counts["attempts"]
			wantFired(t, c, map[string]int64{"lost_ack": n, "value_reused": n - 1})
			if got, want := c.counts["intents"], n; got != want {
				t.Errorf("intents = %d, want %d", got, want)
			}
		}},
		{"stuck", func(t *testing.T, c chaosCheck) {
			wantFired(t, c, map[string]int64{"stuck": c.counts["attempts"]})
		}},
		{"events", func(t *testing.T, c chaosCheck) {
			wantFired(t, c, nil)
			if got := c.counts["kills"]; got < 10000 {
				t.Errorf("kills = %d, want one per line (%d bytes of lines)", got, size)
			}
		}},
		{"unknown-effects", func(t *testing.T, c chaosCheck) {
			wantFired(t, c, map[string]int64{"unknown_effect": c.counts["effects"], "stuck": 1})
		}},
		{"mismatch", func(t *testing.T, c chaosCheck) {
			effects := c.counts["effects"]
			n := c.counts["attempts"]
			wantFired(t, c, map[string]int64{"duplicate": 1, "value_mismatch": n, "value_reused": n - 1})
			want := fmt.Sprintf("applied %d times (place 0 values [1 2 3 4 5 6 7 8 9 10] and %d more)", effects, effects-maxWhereValues)
			if got := c.findings[0].detail; got != want {
				t.Errorf("duplicate detail = %q, want %q", got, want)
			}
		}},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			var b bytes.Buffer
			s := historyShapes[tc.shape]
			if err := chaosHistoryOf(size, "durable", s.body, s.effects)(&b); err != nil {
				t.Fatal(err)
			}
			h, err := readChaosHistory(&b)
			if err != nil {
				t.Fatal(err)
			}
			c := h.check(23)
			tc.check(t, c)
			for rule, n := range c.fired {
				kept := 0
				for _, fd := range c.findings {
					if fd.rule == rule {
						kept++
					}
				}
				if want := min(n, keepFindings); int64(kept) != want {
					t.Errorf("%s: %d findings kept of %d, want %d", rule, kept, n, want)
				}
			}
		})
	}
}

// wantFired checks the findings fired per rule: want's, and none of the
// other rules.
func wantFired(t *testing.T, c chaosCheck, want map[string]int64) {
	t.Helper()
	for _, rule := range chaosRules {
		if got := c.fired[rule]; got != want[rule] {
			t.Errorf("%s fired %d times, want %d", rule, got, want[rule])
		}
	}
}

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
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The audit's worst cases: each an evidence file at (or near) its cap,
// shaped to cost the audit the most memory per byte. TestWorstCases writes
// each into a copy of an evidence folder and checks the audit's verdict.
// With -worstcase.out DIR it also writes each folder into DIR, a copy of
// -worstcase.base (the lab's own evidence by default) with one file
// replaced and the manifest's hash of it updated, for
// testdata/worstcase.sh, which measures the audit on each with
// /usr/bin/time -v. See the caps in read.go.
var (
	worstCaseOut  = flag.String("worstcase.out", "", "also write every worst-case evidence folder, at full size, into this folder")
	worstCaseBase = flag.String("worstcase.base", "", "the evidence folder the written worst cases copy (default: a fixture's)")
)

// A worstCase is one evidence file replaced by a hostile one.
type worstCase struct {
	name  string
	files map[string]func(w io.Writer) error // evidence file -> its writer
	want  string                             // a line the audit must print (a failure, or its error)
}

// nestedChain is a chain of depth objects {"":{"":...{}...}}: five
// bytes an object, the densest a JSON document holds objects.
func nestedChain(depth int) string {
	return strings.Repeat(`{"":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// jsonAtCaps writes a JSON document at both its caps: prefix (holding
// prefixValues values), then elem (holding elemValues) repeated,
// comma-separated, while the document stays under values values, then
// one string element as long as the document needs to be size bytes,
// then suffix.
func jsonAtCaps(size int64, values int, prefix string, prefixValues int, elem string, elemValues int, suffix string) func(w io.Writer) error {
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		n, vals := int64(len(prefix)+len(suffix)), prefixValues
		bw.WriteString(prefix)
		const filler = 3 // `,""`: the string element, empty
		for vals+elemValues+1 <= values && n+int64(len(elem))+1+filler <= size {
			bw.WriteString(elem + ",")
			n += int64(len(elem)) + 1
			vals += elemValues
		}
		bw.WriteString(`"` + strings.Repeat("a", int(size-n-2)) + `"`)
		bw.WriteString(suffix)
		return bw.Flush()
	}
}

// plainBytes writes size bytes of one repeated line (a REPORT.md or an
// SVG the audit compares byte for byte with its own).
func plainBytes(size int64, line string) func(w io.Writer) error {
	return func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		for n := int64(0); n < size; n += int64(len(line)) {
			bw.WriteString(line[:min(int64(len(line)), size-n)])
		}
		return bw.Flush()
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

const placeholder = 200 // bytes a placeholder line takes, newline included

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
	return fmt.Sprintf(`{"kind":"attempt","intent":%d,"key":"k%d","body_sha256":"%s","replica":0,"attempt":%d,"phase":"chaos","start_us":%d,"end_us":%d,"fault":"","type":"%s","outcome":"%s","status":%d,"value":"%s","replayed":%s,"error":""}`,
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
		h.fill(h.header, fmt.Sprintf(`{"kind":"run","history_version":1,"store":"%s","seed":1,"replicas":1,"attempts":%d,"server_events":%d,"places":%d}`,
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
			l := fmt.Sprintf(`{"kind":"kill","replica":0,"at_us":%d,"pid":1,"addr":"","exit_code":-1,"error":""}`, n)
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
				l := fmt.Sprintf(`{"kind":"effect","place":0,"value":%d,"body_sha256":"%s"}`, v, shaOf(v))
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
	// a value_mismatch per acknowledgement, each naming every effect.
	"mismatch": {
		body: func(h *historyWriter) {
			for a := 0; int64(h.buf.Len()) < h.size/2; a++ {
				h.line(attemptLine(0, a, shaOf(0), "ok", "reply", 200, "0", a))
				h.attempts++
			}
		},
		effects: func(h *historyWriter) {
			for v := 1; ; v++ {
				l := fmt.Sprintf(`{"kind":"effect","place":0,"value":%d,"body_sha256":"%s"}`, v, shaOf(0))
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
	const depth = maxDepth - 2 // inside {"x":[...]}, as deep as the parser allows
	chain := nestedChain(depth)
	nested := func(size int64, values int) func(io.Writer) error {
		return jsonAtCaps(size, values, `{"x":[`, 2, chain, depth, "]}")
	}
	// invalid is an array of numbers where the schema wants objects: one
	// cause per element.
	invalid := func(size int64, values int, prefix string, prefixValues int) func(io.Writer) error {
		return jsonAtCaps(size, values, prefix, prefixValues, "0", 1, "]}")
	}
	hist := func(shape string) func(io.Writer) error {
		s := historyShapes[shape]
		return chaosHistoryOf(CapHistory, "durable", s.body, s.effects)
	}
	cases := []worstCase{
		{name: "run-nested", files: map[string]func(io.Writer) error{"run.json": nested(CapRun, ValuesRun)}},
		{name: "run-invalid", files: map[string]func(io.Writer) error{"run.json": invalid(CapRun, ValuesRun, `{"schema_version":1,"started_utc":"x","wall_ms":0,"parallel":1,"runs":[`, 6)}},
		{name: "results-nested", files: map[string]func(io.Writer) error{"results.json": nested(CapResults, ValuesResults)}},
		{name: "results-invalid", files: map[string]func(io.Writer) error{"results.json": invalid(CapResults, ValuesResults, `{"schema_version":1,"runs":[`, 3)}},
		{name: "manifest-nested", files: map[string]func(io.Writer) error{"manifest.json": nested(CapManifest, ValuesManifest)}},
		{name: "statement-nested", files: map[string]func(io.Writer) error{StatementFile: nested(CapStatement, ValuesStatement)}},
		{name: "chaos-nested", files: map[string]func(io.Writer) error{ChaosFile: nested(capOf(ChaosFile), ValuesChaos)}},
		{name: "jitter-nested", files: map[string]func(io.Writer) error{JitterFile: nested(CapJitter, ValuesJitter)}},
		{name: "retries-nested", files: map[string]func(io.Writer) error{RetriesFile: nested(CapRetries, ValuesRetries)}},
		{name: "report-big", files: map[string]func(io.Writer) error{"REPORT.md": plainBytes(CapReport, "| a | b |\n")}},
		{name: "svg-big", files: map[string]func(io.Writer) error{JitterSVGFile: plainBytes(CapSVG, "<g></g>\n")}},
	}
	for _, shape := range []string{"acked", "stuck", "events", "unknown-effects", "mismatch"} {
		cases = append(cases, worstCase{name: "history-" + shape, files: map[string]func(io.Writer) error{chaosHistoryFile("durable"): hist(shape)}})
	}
	others := map[string]func(io.Writer) error{}
	for i := range otherFiles {
		others[fmt.Sprintf("other-%03d.bin", i)] = plainBytes(CapOther, "x")
	}
	cases = append(cases, worstCase{name: "other-files", files: others})
	all := map[string]func(io.Writer) error{
		"run.json": nested(CapRun, ValuesRun), "results.json": invalid(CapResults, ValuesResults, `{"schema_version":1,"runs":[`, 3),
		StatementFile: nested(CapStatement, ValuesStatement), JitterFile: nested(CapJitter, ValuesJitter), RetriesFile: nested(CapRetries, ValuesRetries),
		"REPORT.md": plainBytes(CapReport, "| a | b |\n"), JitterSVGFile: plainBytes(CapSVG, "<g></g>\n"),
		chaosHistoryFile("durable"): hist("acked"),
	}
	for name, w := range others {
		all[name] = w
	}
	return append(cases, worstCase{name: "all", files: all})
}

// otherFiles is how many files the other-files case adds to
// manifest.files, each at CapOther (the manifest's cap would allow
// about 12,000).
const otherFiles = 100

// writeWorstCase writes into dir a copy of the evidence folder base with
// c's files written over (or beside) its own and manifest.files updated.
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
		if name != StatementFile {
			files[name] = sum
		}
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(mp, append(out, '\n'), 0o644)
}

// Ensure the written worst cases are what they claim: a folder per
// case, with each of its files at the size stated and listed in the
// manifest with its hash.
func TestWriteWorstCases(t *testing.T) {
	if *worstCaseOut == "" {
		t.Skip("no -worstcase.out")
	}
	base := *worstCaseBase
	for _, c := range worstCases() {
		if err := writeWorstCase(filepath.Join(*worstCaseOut, c.name), base, c); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
}

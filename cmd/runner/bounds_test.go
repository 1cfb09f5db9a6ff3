package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"idemlab/internal/audit/strict"
	"idemlab/internal/casefile"
	"idemlab/internal/runner"
	"idemlab/internal/target"
)

// boundsDoc is the one place the bounds are listed for people.
const boundsDoc = "../../docs/bounds.md"

// Ensure docs/bounds.md lists the bounds the code enforces: its generated
// sections are rebuilt here from the bounds table, the FlagSet's defaults,
// casefile's constants and the case schema, each error produced by the
// real check, and must match (go test ./cmd/runner -run TestBoundsDoc
// -update rewrites them).
func TestBoundsDoc(t *testing.T) {
	b, err := os.ReadFile(boundsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, sec := range []struct {
		name string
		gen  func(t *testing.T) string
	}{
		{"runner-flags", flagRows},
		{"case-files", caseRows},
		{"case-schema", schemaRows},
		{"target-schema", targetSchemaRows},
	} {
		begin := "<!-- begin " + sec.name + " -->\n"
		end := "<!-- end " + sec.name + " -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Fatalf("%s: no section %q ... %q", boundsDoc, begin, end)
		}
		want := sec.gen(t)
		if got := doc[i+len(begin) : j]; got != want {
			if !*update {
				t.Errorf("%s: section %s is stale (go test ./cmd/runner -run TestBoundsDoc -update)\ngot:\n%s\nwant:\n%s", boundsDoc, sec.name, got, want)
				continue
			}
			doc = doc[:i+len(begin)] + want + doc[j:]
		}
	}
	if *update {
		if err := os.WriteFile(boundsDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// flagRows is the table of every numeric flag, and the argument bound,
// with the error one past the bound gets from the real checks.
func flagRows(t *testing.T) string {
	var b strings.Builder
	b.WriteString("| Flag | Accepts | Default | Past the bound: exit 2 and |\n|---|---|---|---|\n")
	for _, bd := range bounds {
		var o runner.Options
		fs := newFlags(&o)
		f := fs.Lookup(bd.flag)
		_, isDur := fs.Lookup(bd.flag).Value.(interface{ Get() any }).Get().(time.Duration)
		past := strconv.FormatInt(bd.max+1, 10)
		if isDur {
			past = time.Duration(bd.max + time.Minute.Nanoseconds()).String()
		}
		if err := fs.Parse([]string{"-" + bd.flag, past}); err != nil {
			t.Fatalf("-%s %s: %v", bd.flag, past, err)
		}
		err := checkBounds(fs)
		if err == nil {
			t.Fatalf("-%s %s: no error past the bound", bd.flag, past)
		}
		fmt.Fprintf(&b, "| `-%s` | %s | %s | `runner: %v (see docs/bounds.md)` |\n", bd.flag, bd.text(isDur), f.DefValue, err)
	}
	err := checkArgs([]string{"-case", strings.Repeat("x", maxArgBytes+1)})
	fmt.Fprintf(&b, "| every argument | at most %d bytes | | `runner: %v (see runner -h)` |\n", maxArgBytes, err)
	return b.String()
}

// caseRows is the table of casefile's own bounds, each error produced by
// loading a case file just past it.
func caseRows(t *testing.T) string {
	schemas, err := strict.LoadSchemas("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	const head = `{"name":"x","summary":"s","steps":[`
	const tail = `],"expect":{"volatile":{"counter":1,"exit_codes":[0],"calls":[{"outcome":"reply"}]}}}`
	parse := func(doc string) string {
		_, err := casefile.Parse("cases/10-x.json", []byte(doc), schemas)
		if err == nil {
			t.Fatalf("casefile.Parse(%.200q) = nil, want an error", doc)
		}
		return err.Error()
	}
	big := filepath.Join(t.TempDir(), "10-x.json")
	if err := os.WriteFile(big, bytes.Repeat([]byte(" "), casefile.MaxFileBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = casefile.LoadDir(filepath.Dir(big), schemas)
	fileErr := strings.ReplaceAll(err.Error(), filepath.Dir(big), "cases")
	many := t.TempDir()
	for i := range casefile.MaxFiles + 1 {
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("%03d-c.json", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = casefile.LoadDir(many, schemas)
	manyErr := strings.ReplaceAll(err.Error(), many, "cases")
	one, err := casefile.Parse("cases/10-x.json", []byte(head+`{"concurrent":{"clients":10,"call":{"repeat":1000}}}`+
		`],"expect":{"volatile":{"counter":1,"exit_codes":[0],"calls":[`+strings.Repeat(`{"outcome":"reply","repeat":1000},`, 9)+`{"outcome":"reply","repeat":1000}]}}}`), schemas)
	if err != nil {
		t.Fatal(err)
	}
	suiteErr := casefile.CheckSuite([]casefile.Case{one, one}, 2)
	rows := []struct{ what, bound, err string }{
		{"case files", fmt.Sprintf("at most %d in cases/", casefile.MaxFiles), manyErr},
		{"a case file", fmt.Sprintf("a regular file of at most %d bytes (1 MiB)", casefile.MaxFileBytes), fileErr},
		{"its JSON", fmt.Sprintf("valid UTF-8, no member named twice, nested at most %d levels, nothing after the value (the audit's own reader's rules)", strict.MaxDepth),
			parse(head + `{"call":{},"call":{}}` + tail)},
		{"calls per case", fmt.Sprintf("at most %d, repeats and concurrent clients counted", casefile.MaxCalls),
			parse(head + `{"concurrent":{"clients":11,"call":{"repeat":1000}}}` + tail)},
		{"waiting per case", fmt.Sprintf("at most %d ms in all: sleep steps and a parallel step's staggers", casefile.MaxWaitMS),
			parse(head + strings.Repeat(`{"sleep":{"ms":60000}},`, 2) + `{"sleep":{"ms":1}}` + tail)},
		{"calls per run of the runner", fmt.Sprintf("at most %d over every (case, store) run selected (results.json, about 230 bytes a call, is read by the audit up to 8 MiB)", casefile.MaxSuiteCalls),
			suiteErr.Error()},
		{"a key or fault", "no control byte (CR, LF, ...) and no white space at either end: HTTP cannot carry it as written",
			parse(head + `{"call":{"key":"k\r\n"}}` + tail)},
	}
	var b strings.Builder
	b.WriteString("| Input | Bound | Past the bound: exit 2 and |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | `runner: %s` |\n", r.what, r.bound, strings.ReplaceAll(r.err, "|", `\|`))
	}
	return b.String()
}

// schemaRows is every bound the case schema states, read from it, with the
// error one past a bound gets.
func schemaRows(t *testing.T) string {
	schemas, err := strict.LoadSchemas("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	_, perr := casefile.Parse("cases/10-x.json", []byte(`{"name":"x","summary":"s","steps":[{"sleep":{"ms":60001}}],"expect":{"volatile":{"counter":0,"exit_codes":[0],"calls":[]}}}`), schemas)
	return boundRows(t, casefile.SchemaName) + fmt.Sprintf("\nPast any of them: exit 2 naming the file and the field, e.g. `runner: %v`.\n", perr)
}

// targetSchemaRows is every bound the target schema states, read from it,
// with the error one past a bound gets.
func targetSchemaRows(t *testing.T) string {
	schemas, err := strict.LoadSchemas("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	_, perr := target.Parse("targets/x/target.json", []byte(`{"name":"x","summary":"s","start":{"argv":["x","{port}"],"ready":{"tcp":true}},`+
		`"request":{"path":"/","key_header":"Idempotency-Key"},"replay":null,"effects":"sink",`+
		`"claims":{"durable":false,"shared_store":false,"capacity":null,"max_body":null,"key_ttl_ms":0}}`), schemas)
	return boundRows(t, target.SchemaName) + fmt.Sprintf("\nPast any of them: exit 2 naming the file and the field, e.g. `runner: %v`.\n", perr)
}

// boundRows is the table of every bound schema file name states.
func boundRows(t *testing.T, name string) string {
	raw, err := os.ReadFile("../../schema/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	keys := []string{"minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}
	var rows []string
	var walk func(v any, at string)
	walk = func(v any, at string) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		var parts []string
		for _, k := range keys {
			if n, ok := m[k].(float64); ok {
				parts = append(parts, fmt.Sprintf("%s %d", k, int64(n)))
			}
		}
		if len(parts) > 0 {
			rows = append(rows, fmt.Sprintf("| `%s` | %s |", at, strings.Join(parts, ", ")))
		}
		for k, sub := range m {
			switch k {
			case "properties", "definitions":
				for name, p := range sub.(map[string]any) {
					if k == "definitions" {
						walk(p, "#"+name)
					} else {
						walk(p, at+"/"+name)
					}
				}
			case "items":
				walk(sub, at+"/N")
			case "additionalProperties":
				walk(sub, at+"/*")
			case "oneOf":
				for _, alt := range sub.([]any) {
					walk(alt, at)
				}
			}
		}
	}
	walk(doc, "")
	slices.Sort(rows)
	var b strings.Builder
	b.WriteString("| Field (`#name`: a definition) | Bounds |\n|---|---|\n")
	b.WriteString(strings.Join(rows, "\n") + "\n")
	return b.String()
}

package casefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"idemlab/internal/audit/strict"
	"idemlab/internal/protocol"
)

func schemas(t testing.TB) *strict.Schemas {
	t.Helper()
	s, err := strict.LoadSchemas("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Ensure every committed case file loads, in file order, and its
// expectations line up with its steps.
func TestLoadCommittedCases(t *testing.T) {
	cases, err := LoadDir("../../cases", schemas(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for i := 1; i < len(cases); i++ {
		if filepath.Base(cases[i-1].File) >= filepath.Base(cases[i].File) {
			t.Fatalf("cases out of file order: %s before %s", cases[i-1].File, cases[i].File)
		}
	}
	for _, c := range cases {
		if _, ok := c.Expect["volatile"]; !ok {
			t.Errorf("%s: no volatile expectation", c.File)
		}
	}
}

const good = `{"name":"demo","summary":"s","steps":[{"call":{"key":"k-{i}","repeat":3}}],
"expect":{"volatile":{"counter":3,"exit_codes":[0],"calls":[{"outcome":"reply","status":200,"body":"{n}","replayed":false,"repeat":3}]}}}`

// Ensure a malformed case file is refused with a message naming the file
// and the field.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, file, doc, want string
	}{
		{"ok", "10-demo.json", good, ""},
		{"bad file name", "demo.json", good, "demo.json: file name"},
		{"name mismatch", "10-other.json", good, `10-other.json: name: "demo" does not match the file name`},
		{"not json", "10-demo.json", `{"name":`, "10-demo.json: line 1, column 9: not valid JSON: unexpected EOF"},
		// What the audit's strict reader refuses is refused at load, with its place.
		{"invalid utf-8", "10-demo.json", strings.Replace(good, `"summary":"s"`, "\"summary\":\"s\xff\"", 1), "10-demo.json: line 1, column 28: not valid JSON: invalid UTF-8 at byte 27"},
		{"duplicate member", "10-demo.json", strings.Replace(good, `"repeat":3}}`, `"repeat":3,"key":"k2"}}`, 1), `10-demo.json: line 1, column 78: not valid JSON: duplicate member name "key" at byte 77`},
		{"duplicate top member", "10-demo.json", strings.Replace(good, `"summary":"s"`, `"summary":"s","name":"demo"`, 1), `10-demo.json: line 1, column 36: not valid JSON: duplicate member name "name" at byte 35`},
		{"trailing data", "10-demo.json", good + "}", "10-demo.json: line 2, column 138: not valid JSON: unexpected data after the JSON value"},
		{"trailing value", "10-demo.json", good + " {}", "10-demo.json: line 2, column 139: not valid JSON: unexpected data after the JSON value"},
		{"trailing comma", "10-demo.json", good + ",", "10-demo.json: line 2, column 138: not valid JSON: unexpected data after the JSON value"},
		{"deep enough", "10-demo.json", strings.Replace(good, `"summary":"s"`, `"summary":"s","x":`+strings.Repeat("[", 63)+strings.Repeat("]", 63), 1), "10-demo.json: (root): additionalProperties 'x' not allowed"},
		{"too deep", "10-demo.json", strings.Replace(good, `"summary":"s"`, `"summary":"s","x":`+strings.Repeat("[", 64)+strings.Repeat("]", 64), 1), "10-demo.json: line 1, column 97: not valid JSON: nested deeper than 64 levels"},
		// A key or fault HTTP cannot carry is refused at load, naming the step.
		{"key with CRLF", "10-demo.json", strings.Replace(good, `"key":"k-{i}"`, `"key":"k\r\nX-Evil: 1"`, 1), `10-demo.json: /steps/0/call/key: byte 1 is '\r', a control character an HTTP header cannot carry`},
		{"key with NUL", "10-demo.json", strings.Replace(good, `"key":"k-{i}"`, `"key":"k\u0000"`, 1), `10-demo.json: /steps/0/call/key: byte 1 is '\x00'`},
		{"key with DEL", "10-demo.json", strings.Replace(good, `"key":"k-{i}"`, `"key":"k\u007f"`, 1), `10-demo.json: /steps/0/call/key: byte 1 is '\x7f'`},
		{"key with trailing space", "10-demo.json", strings.Replace(good, `"key":"k-{i}"`, `"key":"k "`, 1), `10-demo.json: /steps/0/call/key: "k ": white space at either end is trimmed`},
		{"fault with LF", "10-demo.json", strings.Replace(good, `{"call":{"key":"k-{i}","repeat":3}}`, `{"parallel":{"calls":[{"key":"a"},{"key":"b","fault":"drop\n"},{"key":"c"}]}}`, 1), `10-demo.json: /steps/0/parallel/calls/1/fault: byte 4 is '\n'`},
		{"concurrent key with LF", "10-demo.json", strings.Replace(good, `{"call":{"key":"k-{i}","repeat":3}}`, `{"concurrent":{"clients":3,"call":{"key":"\nk"}}}`, 1), `10-demo.json: /steps/0/concurrent/call/key: byte 0 is '\n'`},
		{"too long waits", "10-demo.json", strings.Replace(good, `{"call":{"key":"k-{i}","repeat":3}}`, `{"sleep":{"ms":60000}},{"sleep":{"ms":50000}},{"parallel":{"calls":[{"key":"a"},{"key":"b"},{"key":"c"}],"stagger_ms":5001}}`, 1), "10-demo.json: steps: the sleeps and staggers wait 120002 ms in all, at most 120000 per case"},
		{"unknown field", "10-demo.json", strings.Replace(good, `"summary"`, `"sumary"`, 1), "10-demo.json: (root): additionalProperties 'sumary' not allowed; (root): missing properties: 'summary'"},
		{"bad fault type", "10-demo.json", strings.Replace(good, `"repeat":3}}`, `"repeat":3,"fault":7}}`, 1), "10-demo.json: /steps/0/call/fault: expected string, but got number"},
		{"two actions", "10-demo.json", strings.Replace(good, `"repeat":3}}`, `"repeat":3},"restart":{"stop":"sigterm"}}`, 1), "10-demo.json: /steps/0: maximum 1 properties allowed, but found 2 properties"},
		{"bad stop", "10-demo.json", strings.Replace(good, `{"call":{"key":"k-{i}","repeat":3}}`, `{"call":{"key":"k-{i}","repeat":3}},{"restart":{"stop":"reboot"}}`, 1), "10-demo.json: /steps/1/restart/stop: value must be one of"},
		{"unknown store", "10-demo.json", strings.Replace(good, `"volatile"`, `"volatle"`, 1), "10-demo.json: /expect: additionalProperties 'volatle' not allowed"},
		{"replica beyond replicas", "10-demo.json", strings.Replace(good, `"repeat":3}}`, `"repeat":3,"replica":1}}`, 1), "10-demo.json: /steps/0/call/replica: replica 1, but the case runs 1 (replicas)"},
		{"stop a stopped replica", "10-demo.json", strings.Replace(good, `{"call":{"key":"k-{i}","repeat":3}}`, `{"call":{"key":"k-{i}","repeat":3}},{"stop":{"how":"sigterm"}},{"stop":{"how":"sigterm"}}`, 1), "10-demo.json: /steps/2/stop: replica 0 is already stopped"},
		{"start a running replica", "10-demo.json", strings.Replace(good, `{"call":{"key":"k-{i}","repeat":3}}`, `{"call":{"key":"k-{i}","repeat":3}},{"start":{}}`, 1), "10-demo.json: /steps/1/start: replica 0 is already running"},
		{"across one replica", "10-demo.json", strings.Replace(good, `{"call":{"key":"k-{i}","repeat":3}}`, `{"concurrent":{"clients":3,"call":{"key":"k"},"across_replicas":true}}`, 1), "10-demo.json: /steps/0/concurrent/across_replicas: the case runs one replica"},
		{"two bodies", "10-demo.json", strings.Replace(good, `"repeat":3}}`, `"repeat":3,"body":"a","body_bytes":5}}`, 1), "10-demo.json: /steps/0/call: body and body_bytes exclude each other (give one)"},
		{"too many calls", "10-demo.json", strings.Replace(good, `{"call":{"key":"k-{i}","repeat":3}}`, `{"concurrent":{"clients":11,"call":{"key":"k","repeat":1000}}}`, 1), "10-demo.json: steps: 11000 calls, at most 10000 per case"},
		{"sound store without an expectation", "10-demo.json", strings.Replace(good, `"steps"`, `"target":{"sound":"durable","tests":["duplicate_effect"]},"steps"`, 1), `10-demo.json: target/sound: "durable" has no expectation in expect`},
		{"unknown rule", "10-demo.json", strings.Replace(good, `"steps"`, `"target":{"sound":"volatile","tests":["nice_reply"]},"steps"`, 1), "10-demo.json: /target/tests/0: value must be one of"},
		{"call count", "10-demo.json", strings.Replace(good, `"replayed":false,"repeat":3`, `"replayed":false,"repeat":2`, 1), "10-demo.json: expect.volatile.calls: 2 expected calls, but the steps make 3 calls"},
	}
	set := schemas(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(filepath.Join("cases", tt.file), []byte(tt.doc), set)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Parse = %v, want nil", err)
				}
				if got, want := c.CallCount(), 3; got != want {
					t.Fatalf("CallCount = %d, want %d", got, want)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse error = %v, want *Error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// Ensure Plan lists one planned call per recorded call, in recorded
// order, with its fault and body length.
func TestPlan(t *testing.T) {
	doc := `{"name":"demo","summary":"s","steps":[
{"call":{"key":"k-{i}","repeat":2,"fault":"slow"}},
{"concurrent":{"clients":2,"call":{"key":"g","body_bytes":5}}},
{"sleep":{"ms":1}},
{"call":{"body":"abc"}}],
"expect":{"volatile":{"counter":0,"exit_codes":[0],"calls":[{"outcome":"reply","repeat":5}]}}}`
	c, err := Parse(filepath.Join("cases", "10-demo.json"), []byte(doc), schemas(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range c.Plan() {
		got = append(got, fmt.Sprintf("%q %d", p.Fault, p.BodyLen))
	}
	want := []string{`"slow" 7`, `"slow" 7`, `"" 5`, `"" 5`, `"" 3`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Plan =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Ensure two files with the same case name are refused.
func TestLoadDirDuplicateName(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"10-demo.json", "20-demo.json"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := LoadDir(dir, schemas(t))
	if err == nil || !strings.Contains(err.Error(), "20-demo.json: name") {
		t.Fatalf("LoadDir = %v, want the duplicate named", err)
	}
}

func ptr[T any](v T) *T { return &v }

// Ensure the repeat templates mean the same in keys and request bodies:
// {i} counts from 0, {n} from 1.
func TestKeyForAndBody(t *testing.T) {
	c := Call{Key: ptr("key-{i}-{n}"), Body: ptr("body-{i}-{n}")}
	if got := *c.KeyFor(7); got != "key-7-8" {
		t.Fatalf("KeyFor(7) = %q, want key-7-8", got)
	}
	if got := string(c.BodyFor(7)); got != "body-7-8" {
		t.Fatalf("BodyFor(7) = %q, want body-7-8", got)
	}
	if got := (Call{}).KeyFor(0); got != nil {
		t.Fatalf("KeyFor without key = %q, want nil", *got)
	}
	if got := string((Call{}).BodyFor(0)); got != protocol.DefaultBody {
		t.Fatalf("default body = %q", got)
	}
	if got := len((Call{BodyBytes: ptr(4097)}).BodyFor(0)); got != 4097 {
		t.Fatalf("body_bytes body length = %d", got)
	}
}

// FuzzParse: arbitrary bytes never panic the loader, and anything it accepts
// has expectations that line up with its steps.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("../../cases/*.json")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(filepath.Base(p), b)
	}
	f.Add("10-demo.json", []byte(good))
	set := schemas(f)
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		c, err := Parse(filepath.Join("cases", name), b, set)
		if err != nil {
			return
		}
		for store, x := range c.Expect {
			if len(x.Statuses()) != c.CallCount() {
				t.Fatalf("accepted %s: store %s expects %d calls, steps make %d", name, store, len(x.Statuses()), c.CallCount())
			}
		}
	})
}

// Ensure LoadDir reads only regular case files within the size cap: a
// FIFO (no hang), a symlink or an oversized file is refused naming it.
func TestLoadDirRefusesNonRegular(t *testing.T) {
	set := schemas(t)
	for _, tt := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "not a regular file (a FIFO)"},
		{"symlink", func(p string) error { return os.Symlink("/dev/zero", p) }, "not a regular file (a symlink)"},
		{"oversized", func(p string) error { return os.WriteFile(p, make([]byte, MaxFileBytes+1), 0o644) }, "file too large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "10-demo.json")
			if err := tt.make(path); err != nil {
				t.Fatal(err)
			}
			_, err := LoadDir(dir, set)
			if err == nil || !strings.Contains(err.Error(), path+": "+tt.want) {
				t.Fatalf("LoadDir error = %v, want %q naming %s", err, tt.want, path)
			}
		})
	}
}

// Ensure the schema's bounds on a case are the ones the Go constants (and
// docs/bounds.md, built from them) state.
func TestSchemaBounds(t *testing.T) {
	b, err := os.ReadFile("../../schema/" + SchemaName)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Definitions struct {
			Call struct {
				Properties struct {
					Key       struct{ MaxLength int }
					Fault     struct{ MaxLength int }
					BodyBytes struct{ Maximum int } `json:"body_bytes"`
				}
			}
			Step struct {
				Properties struct {
					Sleep struct {
						Properties struct{ MS struct{ Maximum int } }
					}
				}
			}
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	call := doc.Definitions.Call.Properties
	if got, want := call.BodyBytes.Maximum, MaxBodyBytes; got != want {
		t.Errorf("schema body_bytes maximum = %d, want MaxBodyBytes %d", got, want)
	}
	if got, want := call.Key.MaxLength, MaxKeyLength; got != want {
		t.Errorf("schema key maxLength = %d, want MaxKeyLength %d", got, want)
	}
	if got, want := call.Fault.MaxLength, MaxFaultLength; got != want {
		t.Errorf("schema fault maxLength = %d, want MaxFaultLength %d", got, want)
	}
	if got := doc.Definitions.Step.Properties.Sleep.Properties.MS.Maximum; got == 0 || got > MaxWaitMS {
		t.Errorf("schema sleep ms maximum = %d, want 1..MaxWaitMS (%d)", got, MaxWaitMS)
	}
}

// Ensure a cases folder with more case files than the bound is refused,
// before any is read.
func TestLoadDirTooManyFiles(t *testing.T) {
	dir := t.TempDir()
	for i := range MaxFiles + 1 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d-c.json", i)), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := LoadDir(dir, schemas(t))
	if want := fmt.Sprintf("101 *.json files in %s, at most 100", dir); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("LoadDir = %v, want an error saying %q", err, want)
	}
}

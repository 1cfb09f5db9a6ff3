package strict

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// wholeLines is Validate without parts: the validator given the whole
// document, its leaves sorted, the first MaxSchemaLines and the rest
// counted.
func wholeLines(s *jsonschema.Schema, v any) []string {
	var c schemaLines
	c.add(leaves(s, v, ""))
	return c.result()
}

// Ensure validating a document in parts gives exactly the lines the
// validator gives for it whole, on the lab's own documents and on
// thousands of mutants of them: a member dropped, added or given a value
// of another type, anywhere.
func TestValidateInParts(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	s, err := LoadSchemas(filepath.Join(root, "schema"))
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]*jsonschema.Schema{
		"evidence/results.json": s.Schema("results.schema.json"), "evidence/run.json": s.Schema("run.schema.json"),
		"evidence/manifest.json": s.Schema("manifest.schema.json"), "evidence/jitter.json": s.Schema("jitter.schema.json"),
		"evidence/retries.json": s.Schema("retries.schema.json"), "cases/30-concurrent_duplicate.json": s.Schema("case.schema.json"),
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, rel := range slices.Sorted(maps.Keys(docs)) {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			v, err := Decode(data, Caps{len(data), len(data)})
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			what := "as it is"
			if i > 0 {
				what = mutate(r, &v, 1+r.IntN(3))
			}
			if got, want := Validate(docs[rel], v), wholeLines(docs[rel], v); !slices.Equal(got, want) {
				t.Fatalf("%s, %s: in parts\n%q\nwhole\n%q", rel, what, got, want)
			}
		}
	}
}

// mutate changes n nodes of *v at random and says how.
func mutate(r *rand.Rand, v *any, n int) string {
	var how string
	for range n {
		type node struct {
			get func() any
			set func(any)
		}
		var nodes []node
		var walk func(get func() any, set func(any))
		walk = func(get func() any, set func(any)) {
			nodes = append(nodes, node{get, set})
			switch x := get().(type) {
			case map[string]any:
				for _, k := range slices.Sorted(maps.Keys(x)) {
					walk(func() any { return x[k] }, func(nv any) { x[k] = nv })
				}
			case []any:
				for i := range x {
					walk(func() any { return x[i] }, func(nv any) { x[i] = nv })
				}
			}
		}
		walk(func() any { return *v }, func(nv any) { *v = nv })
		p := nodes[r.IntN(len(nodes))]
		switch m, isObj := p.get().(map[string]any); {
		case isObj && len(m) > 0 && r.IntN(3) == 0:
			k := slices.Sorted(maps.Keys(m))[r.IntN(len(m))]
			delete(m, k)
			how += fmt.Sprintf("; member %q dropped", k)
		case isObj && r.IntN(3) == 0:
			m["extra"] = json.Number("1")
			how += "; a member added"
		default:
			nv := []any{json.Number("0"), "x", nil, true, map[string]any{}, []any{}, map[string]any{"a": []any{"b"}}}[r.IntN(7)]
			p.set(nv)
			how += fmt.Sprintf("; a node now %s", render(nv))
		}
	}
	return how[2:]
}

// Ensure Check reads the real schemas' documents strictly and reports a
// violation location first, and that a syntax error is placed at its
// line and column for the file's author.
func TestCheck(t *testing.T) {
	set, err := LoadSchemas("../../../schema")
	if err != nil {
		t.Fatal(err)
	}
	caps := Caps{Values: 1000, Objects: 1000}
	for _, tt := range []struct {
		name, schema, doc, want string
	}{
		{"valid results", "results.schema.json", `{"schema_version":1,"runs":[]}`, ""},
		{"wrong type", "results.schema.json", `{"schema_version":1,"runs":[{"case":"a","store":"volatile","counter":"2","exit_codes":[],"calls":[]}]}`, "/runs/0/counter: expected integer, but got string"},
		{"unknown member", "results.schema.json", `{"schema_version":1,"runs":[],"extra":1}`, "(root): additionalProperties 'extra' not allowed"},
		{"not JSON", "results.schema.json", `{`, "line 1, column 2: not valid JSON: unexpected EOF"},
		{"trailing data", "results.schema.json", "{\"schema_version\":1,\n\"runs\":[]} {}", "line 2, column 12: not valid JSON: unexpected data after the JSON value"},
		{"twice", "results.schema.json", `{"runs":[],"runs":[]}`, `line 1, column 18: not valid JSON: duplicate member name "runs" at byte 17`},
		{"over a cap", "results.schema.json", `{"schema_version":1,"runs":[` + strings.Repeat("1,", 1000) + `1]}`, "over the cap of 1000 JSON values"},
	} {
		doc := []byte(tt.doc)
		_, err := set.Check(tt.schema, doc, caps)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: Check = %v, want nil", tt.name, err)
			}
			continue
		}
		if _, ok := errors.AsType[*Error](err); !ok {
			t.Errorf("%s: Check = %v, want an *Error", tt.name, err)
			continue
		}
		if got := Problem(doc, err); !strings.Contains(got, tt.want) {
			t.Errorf("%s: Problem = %q, want it to contain %q", tt.name, got, tt.want)
		}
	}
	if _, err := set.Check("nosuch.schema.json", []byte(`{}`), caps); err == nil {
		t.Error("Check(nosuch.schema.json) = nil, want an error")
	}
}

// Ensure a kept compiled set never stands in for other bytes: the same
// folder loads once, a schema edited by one keyword compiles again and
// judges by the edit, and the kept sets stay bounded.
func TestLoadSchemasKeepsBySchemaBytes(t *testing.T) {
	dir := t.TempDir()
	write := func(schema string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "x.schema.json"), []byte(schema), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load := func() *Schemas {
		t.Helper()
		s, err := LoadSchemas(dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}`)
	first := load()
	if again := load(); again != first {
		t.Error("the same folder was compiled twice")
	}
	if got := Validate(first.Schema("x.schema.json"), map[string]any{}); len(got) != 0 {
		t.Fatalf("an object against type object: %q", got)
	}
	write(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array"}`)
	edited := load()
	if edited == first || len(Validate(edited.Schema("x.schema.json"), map[string]any{})) == 0 {
		t.Fatal("an edited schema was judged by the set compiled before the edit")
	}
	for i := range maxCompiledSets + 3 {
		write(fmt.Sprintf(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "maxLength": %d}`, i))
		load()
	}
	compiled.mu.Lock()
	n, m := len(compiled.sets), len(compiled.order)
	compiled.mu.Unlock()
	if n > maxCompiledSets || n != m {
		t.Errorf("%d sets kept (%d in order), want at most %d", n, m, maxCompiledSets)
	}
}

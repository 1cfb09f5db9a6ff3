package audit

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// wholeLines is validate without parts: the validator given the whole
// document, its leaves sorted, the first maxSchemaLines and the rest
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
	root := filepath.Join("..", "..")
	s, err := LoadSchemas(root)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]*jsonschema.Schema{
		"evidence/results.json": s.Results, "evidence/run.json": s.Run, "evidence/manifest.json": s.Manifest,
		"evidence/jitter.json": s.Jitter, "evidence/retries.json": s.Retries, "cases/30-concurrent_duplicate.json": s.Case,
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, rel := range sortedKeys(docs) {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			v, err := decodeJSON(data, jsonCap{len(data), len(data)})
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			what := "as it is"
			if i > 0 {
				what = mutate(r, &v, 1+r.IntN(3))
			}
			if got, want := validate(docs[rel], v), wholeLines(docs[rel], v); !slices.Equal(got, want) {
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
				for _, k := range sortedKeys(x) {
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
			k := sortedKeys(m)[r.IntN(len(m))]
			delete(m, k)
			how += fmt.Sprintf("; member %q dropped", k)
		case isObj && r.IntN(3) == 0:
			m["extra"] = jsonNum("1")
			how += "; a member added"
		default:
			nv := []any{jsonNum("0"), "x", nil, true, map[string]any{}, []any{}, map[string]any{"a": []any{"b"}}}[r.IntN(7)]
			p.set(nv)
			how += fmt.Sprintf("; a node now %s", render(nv))
		}
	}
	return how[2:]
}

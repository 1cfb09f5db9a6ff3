package audit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Ensure the case-file loader never panics, whatever the bytes; the seed
// corpus is the real case files.
func FuzzLoadCase(f *testing.F) {
	schemas, err := LoadSchemas(filepath.Join("..", ".."))
	if err != nil {
		f.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join("..", "..", "cases", "*.json"))
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add("cases/"+filepath.Base(p), data)
	}
	f.Add("cases/10-x.json", []byte(`{"name":"x","summary":"s","steps":[{"call":{}}],"expect":{"volatile":{"counter":1e400,"exit_codes":[],"calls":[{"outcome":"reply","repeat":3,"body":"{n}{n}"}]}}}`))
	f.Fuzz(func(t *testing.T, file string, data []byte) {
		c, err := schemas.LoadCase(file, data)
		if err == nil && (c == nil || c.Name == "" || len(c.Expect) == 0) {
			t.Fatalf("LoadCase() = %+v, nil error, want a named case with expectations", c)
		}
	})
}

// FuzzDecodeObject feeds audit -merge's reader of a slice's files any
// bytes: it refuses what is not one JSON object with distinct names, and
// what it accepts it writes back as the same value, members in order.
func FuzzDecodeObject(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":1,"b":[1,2,{"c":null}]}`, `{"a":1,"a":2}`, `[1]`, `{"a":1} {}`, `{"k":"\u003c"}`, ` {"x" : { } } `} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := decodeObject(data)
		if err != nil {
			return
		}
		out, err := o.MarshalJSON()
		if err != nil {
			t.Fatalf("decoded %q, cannot write it back: %v", data, err)
		}
		if !sameJSON(data, out) {
			t.Fatalf("decoded %q, wrote back %q: another value", data, out)
		}
		again, err := decodeObject(out)
		if err != nil || !slices.Equal(again.keys, o.keys) {
			t.Fatalf("wrote %q back from %q: reads as %v, %v; want the members %v", out, data, again, err, o.keys)
		}
	})
}

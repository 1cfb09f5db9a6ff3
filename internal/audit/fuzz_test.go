package audit

import (
	"os"
	"path/filepath"
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

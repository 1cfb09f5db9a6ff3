package audit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"idemlab/internal/audit/strict"
)

// Ensure readInside reads only regular files inside its folder, within the
// cap, and never follows a symlink, however deep.
func TestReadInside(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "ok.json"), "{}")
	write(filepath.Join(dir, "sub", "deep.json"), "[]")
	write(filepath.Join(outside, "x.json"), "{}")
	os.Symlink(filepath.Join(outside, "x.json"), filepath.Join(dir, "link.json"))
	os.Symlink(outside, filepath.Join(dir, "linkdir"))
	os.Mkdir(filepath.Join(dir, "adir"), 0o755)
	fifo := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	tests := []struct {
		rel   string
		limit int64
		want  string // content, or the error's text
	}{
		{"ok.json", 10, "{}"},
		{"sub/deep.json", 10, "[]"},
		{"ok.json", 1, "2 bytes, over the cap of 1 bytes"},
		{"link.json", 10, "a symbolic link"},
		{"linkdir/x.json", 10, "a symbolic link"},
		{"adir", 10, "not a regular file"},
		{"../x.json", 10, "not a clean relative path"},
		{"/etc/passwd", 10, "not a clean relative path"},
		{"missing.json", 10, "no such file"},
	}
	if fifo == nil {
		tests = append(tests, struct {
			rel   string
			limit int64
			want  string
		}{"fifo", 10, "not a regular file"})
	}
	for _, tt := range tests {
		data, err := readInside(dir, tt.rel, tt.limit)
		got := string(data)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("readInside(%q, %d) = %q, want %q", tt.rel, tt.limit, got, tt.want)
		}
	}
	if _, err := readInside(dir, "link.json", 10); !errors.Is(err, errSymlink) {
		t.Errorf("readInside(link) error = %v, want errSymlink", err)
	}
}

// Ensure the audit's reading of the key and fault syntax gives the
// server's error texts.
func TestKeyAndFaultErrors(t *testing.T) {
	keys := map[string]string{
		"abc-1_Z": "", `"abc"`: "", strings.Repeat("k", 64): "",
		"": "empty key", `""`: "empty key", `"abc`: "unbalanced quote", `a"b`: "unbalanced quote",
		strings.Repeat("k", 65): "key longer than 64 characters", "bad key": "key has a character outside [A-Za-z0-9_-]",
	}
	for in, want := range keys {
		if got := keyError(in); got != want {
			t.Errorf("keyError(%q) = %q, want %q", in, got, want)
		}
	}
	faults := map[string]string{
		"drop-reply": "", "delay=15ms": "", "stall=2000ms,crash-after-effect": "", "slow,drop-reply": "",
		"": "empty fault", "drop-reply,": "empty fault", "dorp": `unknown fault "dorp"`,
		"delay": `bad fault argument "delay"`, "delay=60001ms": `bad fault argument "delay=60001ms"`,
		"slow=1ms": `bad fault argument "slow=1ms"`, "slow,delay=1ms": `two faults act at the same point "slow,delay=1ms"`,
		"crash-before-effect,crash-after-record": `two faults act at the same point "crash-before-effect,crash-after-record"`,
	}
	for in, want := range faults {
		if got := faultError(in); got != want {
			t.Errorf("faultError(%q) = %q, want %q", in, got, want)
		}
	}
}

// Ensure a replace by a folder is found in both go.mod spellings, and a
// replace by a module version is not.
func TestLocalReplaces(t *testing.T) {
	gomod := "module m\n\nreplace a.b/c => ../c\nreplace a.b/d v1.0.0 => a.b/e v1.1.0 // a version\nreplace (\n\tx.y/z => ./vendored/z\n\tx.y/w => /abs/w\n\tx.y/v => x.y/u v0.1.0\n)\n"
	got := localReplaces(gomod)
	want := []string{"replace a.b/c => ../c", "replace x.y/z => ./vendored/z", "replace x.y/w => /abs/w"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("localReplaces() = %q, want %q", got, want)
	}
}

// Ensure the protocol constants are read as the compiler would evaluate
// them, durations included.
func TestReadConstants(t *testing.T) {
	root := t.TempDir()
	src := "package protocol\n\nimport \"time\"\n\nconst (\n\tA = 64\n\tB = A * 2\n\tW = 5 * time.Second\n\tS = \"x\" + \"y\"\n\tD time.Duration = 120 * time.Millisecond\n\tL = Later + 1\n)\n\nconst Later = 9\n"
	if err := os.MkdirAll(filepath.Join(root, "internal", "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "internal", "p", "p.go"), []byte(src), 0o644)
	os.WriteFile(filepath.Join(root, "internal", "p", "p_test.go"), []byte("package protocol\n\nconst A = 1\n"), 0o644)
	got, err := readConstants(root, "internal/p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "64", "B": "128", "W": "5000000000", "S": `"xy"`, "D": "120000000", "L": "10", "Later": "9"}
	for k, w := range want {
		if v, ok := got[k]; !ok || v.ExactString() != w {
			t.Errorf("readConstants()[%s] = %v, want %s", k, v, w)
		}
	}
}

// Ensure a remembered validation never stands in for other bytes or
// another schema, and the remembered documents stay bounded.
func TestValidatedByBytes(t *testing.T) {
	dir := t.TempDir()
	for name, schema := range map[string]string{"a.schema.json": `{"type": "object", "properties": {"n": {"type": "integer"}}}`,
		"b.schema.json": `{"type": "object", "required": ["m"]}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(schema), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := strict.LoadSchemas(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, b := set.Schema("a.schema.json"), set.Schema("b.schema.json")
	check := func(s *jsonschema.Schema, doc string, wantProblems bool) {
		t.Helper()
		v, err := decodeJSON([]byte(doc), capRunJSON)
		if err != nil {
			t.Fatal(err)
		}
		if got := validated.lines(s, []byte(doc), v); (len(got) > 0) != wantProblems {
			t.Errorf("%s: problems %q, want some: %v", doc, got, wantProblems)
		}
	}
	check(a, `{"n": 1}`, false)
	check(a, `{"n": 1}`, false)
	check(a, `{"n": "1"}`, true)
	check(b, `{"n": 1}`, true) // the same bytes, another schema
	for i := range maxValidations + 10 {
		check(a, `{"n": `+strings.Repeat("1", 1+i%5)+`, "i": "`+strings.Repeat("x", i)+`"}`, false)
	}
	validated.mu.Lock()
	n := len(validated.seen)
	validated.mu.Unlock()
	if n > maxValidations {
		t.Errorf("%d documents remembered, want at most %d", n, maxValidations)
	}
}

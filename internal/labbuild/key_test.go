package labbuild

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// keyModule has a program that imports a (which embeds a file and imports
// b), a package c that nothing imports, and a local replacement dep.
var keyModule = map[string]string{
	"go.mod":                    "module probe\n\ngo 1.26\n\nrequire example.com/dep v0.0.0\n\nreplace example.com/dep => ./dep\n",
	"README.md":                 "probe\n",
	"cmd/probe/main.go":         "package main\n\nimport \"probe/internal/a\"\n\nfunc main() { println(a.Word) }\n",
	"internal/a/a.go":           "package a\n\nimport (\n\t_ \"embed\"\n\n\t\"probe/internal/b\"\n)\n\n//go:embed data/word.txt\nvar Word string\n\nvar _ = b.B\n",
	"internal/a/data/word.txt":  "none",
	"internal/b/b.go":           "package b\n\nconst B = 1\n",
	"internal/b/b_test.go":      "package b\n",
	"internal/b/testdata/x.txt": "x",
	"internal/c/c.go":           "package c\n",
	"dep/go.mod":                "module example.com/dep\n\ngo 1.26\n",
	"dep/dep.go":                "package dep\n",
	"dep/dep_test.go":           "package dep\n",
}

var keyGoEnv = map[string]string{"GOVERSION": "go1.26.8", "GOOS": "linux", "GOARCH": "amd64", "GOAMD64": "v1"}

// Ensure the key changes with every input that can change the binary, and
// with nothing else.
func TestKeyInputs(t *testing.T) {
	t.Parallel()
	base := key(t, writeTree(t, keyModule), keyGoEnv)
	for _, tt := range []struct {
		name    string
		file    string // written below the module, when set
		data    string
		goenv   map[string]string // replaces keyGoEnv, when set
		changed bool
	}{
		{name: "the program's file", file: "cmd/probe/main.go", data: "package main\n\nfunc main() {}\n", changed: true},
		{name: "a new file in the program", file: "cmd/probe/more.go", data: "package main\n", changed: true},
		{name: "an imported package", file: "internal/a/a.go", data: "package a\n", changed: true},
		{name: "a package imported indirectly", file: "internal/b/b.go", data: "package b\n\nconst B = 2\n", changed: true},
		{name: "an assembly file", file: "internal/b/b_amd64.s", data: "\n", changed: true},
		{name: "an embedded file", file: "internal/a/data/word.txt", data: "other", changed: true},
		{name: "go.mod", file: "go.mod", data: keyModule["go.mod"] + "\n// edited\n", changed: true},
		{name: "a new go.sum", file: "go.sum", data: "x\n", changed: true},
		{name: "a local replacement", file: "dep/dep.go", data: "package dep\n\nvar X int\n", changed: true},
		{name: "the go version", goenv: map[string]string{"GOVERSION": "go1.26.9", "GOOS": "linux", "GOARCH": "amd64", "GOAMD64": "v1"}, changed: true},
		{name: "GOAMD64", goenv: map[string]string{"GOVERSION": "go1.26.8", "GOOS": "linux", "GOARCH": "amd64", "GOAMD64": "v3"}, changed: true},
		{name: "a test file", file: "internal/b/b_test.go", data: "package b\n\nfunc f() {}\n"},
		{name: "testdata", file: "internal/b/testdata/y.txt", data: "y"},
		{name: "a file the go command ignores", file: "internal/b/_skip.go", data: "package b\n"},
		{name: "a package nothing imports", file: "internal/c/c.go", data: "package c\n\nvar C int\n"},
		{name: "a new package", file: "internal/d/d.go", data: "package d\n"},
		{name: "the README", file: "README.md", data: "edited\n"},
		{name: "a replacement's test file", file: "dep/dep_test.go", data: "package dep\n\nfunc f() {}\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := writeTree(t, keyModule)
			if tt.file != "" {
				write(t, filepath.Join(root, filepath.FromSlash(tt.file)), tt.data)
			}
			goenv := keyGoEnv
			if tt.goenv != nil {
				goenv = tt.goenv
			}
			if got := key(t, root, goenv) != base; got != tt.changed {
				t.Errorf("key changed = %v, want %v", got, tt.changed)
			}
		})
	}
}

func key(t *testing.T, root string, goenv map[string]string) string {
	t.Helper()
	in, err := keyInputs(root, "./cmd/probe", goenv)
	if err != nil {
		t.Fatal(err)
	}
	return hashBytes([]byte(in))
}

// Ensure a missing imported package does not stop the key: go build
// reports it.
func TestKeyInputsMissingImport(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod":            "module probe\n\ngo 1.26\n",
		"cmd/probe/main.go": "package main\n\nimport _ \"probe/internal/gone\"\n\nfunc main() {}\n",
	})
	in, err := keyInputs(root, "./cmd/probe", keyGoEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := "file internal/gone/ missing\n"; !strings.Contains(in, want) {
		t.Errorf("keyInputs = %q, want a line %q", in, want)
	}
	if _, err := Build(context.Background(), Options{Root: root, Package: "./cmd/probe", CacheDir: t.TempDir()}); err == nil {
		t.Errorf("Build with a missing package succeeded")
	}
}

func TestParseGoMod(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		want goMod
	}{
		{"plain", "module idemlab\n\ngo 1.26.0\n", goMod{path: "idemlab"}},
		{"quoted", "module \"example.com/x\" // comment\n", goMod{path: "example.com/x"}},
		{"one-line replace", "module m\nreplace a.com/b => ../b\nreplace a.com/c v1.0.0 => ./c\n", goMod{path: "m", localReplace: []string{filepath.FromSlash("../b"), filepath.FromSlash("./c")}}},
		{"replace block", "module m\nreplace (\n\ta.com/b => /abs/b // why\n\ta.com/c => a.com/d v1.2.3\n)\n", goMod{path: "m", localReplace: []string{filepath.FromSlash("/abs/b")}}},
		{"module replacement is not local", "module m\nreplace a.com/b v1 => a.com/c v2\n", goMod{path: "m"}},
	} {
		got, err := parseGoMod([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: parseGoMod = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if _, err := parseGoMod([]byte("go 1.26\n")); err == nil {
		t.Errorf("parseGoMod without a module line: no error")
	}
}

// Ensure the key does not depend on where the module lives.
func TestKeyInputsIndependentOfPlace(t *testing.T) {
	a := key(t, writeTree(t, keyModule), keyGoEnv)
	b := key(t, writeTree(t, keyModule), keyGoEnv)
	if a != b {
		t.Errorf("two copies of one module have keys %s and %s", a, b)
	}
}

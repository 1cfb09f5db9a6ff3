package main

import (
	"bytes"
	"go/ast"
	"go/constant"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/protocol"
)

// Ensure the fixture's constants file is gofmt'd Go that declares every
// protocol constant the manifest records, each with the lab's value as the
// Go type checker evaluates it (the audit reads them with go/parser).
func TestProtocolFile(t *testing.T) {
	src := protocolFile()
	if got, err := format.Source(src); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("protocolFile() is not gofmt'd Go (%v):\n%s", err, src)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "protocol.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("protocol", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want constant.Value
	}{
		{"EffectPath", constant.MakeString(protocol.EffectPath)},
		{"KeyHeader", constant.MakeString(protocol.KeyHeader)},
		{"ReplayedHeader", constant.MakeString(protocol.ReplayedHeader)},
		{"FaultHeader", constant.MakeString(protocol.FaultHeader)},
		{"KeyPattern", constant.MakeString(protocol.KeyPattern)},
		{"DefaultBody", constant.MakeString(protocol.DefaultBody)},
		{"DefaultCapacity", constant.MakeInt64(protocol.DefaultCapacity)},
		{"DefaultMaxBody", constant.MakeInt64(protocol.DefaultMaxBody)},
		{"DefaultWait", constant.MakeInt64(int64(protocol.DefaultWait))},
		{"SlowDelay", constant.MakeInt64(int64(protocol.SlowDelay))},
		{"CrashExitCode", constant.MakeInt64(protocol.CrashExitCode)},
		{"DefaultClientTimeout", constant.MakeInt64(int64(protocol.DefaultClientTimeout))},
	} {
		obj, ok := pkg.Scope().Lookup(c.name).(*types.Const)
		if !ok {
			t.Errorf("protocolFile() declares no constant %s", c.name)
			continue
		}
		if got := obj.Val(); !constant.Compare(got, token.EQL, c.want) {
			t.Errorf("%s = %s, want %s", c.name, got, c.want)
		}
	}
}

// Ensure the root's commit depends on its files alone: the same files in
// another folder commit to the same hash, one changed byte to another.
func TestCommit(t *testing.T) {
	write := func(files map[string]string) string {
		root := t.TempDir()
		for name, data := range files {
			if err := writeFile(filepath.Join(root, filepath.FromSlash(name)), []byte(data)); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	files := map[string]string{"go.mod": "module idemlab\n", "go.sum": "", "cases/10-a.json": "{}\n", "schema/a.schema.json": "{}\n",
		"internal/protocol/protocol.go": string(protocolFile()), "cmd/effectserver/main.go": standInServer,
		"targets/a/target.json": "{}\n"}
	a, err := Commit(write(files))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Commit(write(files))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("the same files committed to %s and %s", a, b)
	}
	files["cases/10-a.json"] = "{} \n"
	if c, err := Commit(write(files)); err != nil || c == a {
		t.Errorf("a changed case file committed to %s (%v), the same as before", c, err)
	}
}

// Ensure bad invocations exit 2, naming what was wrong, before anything
// runs.
func TestRunUsage(t *testing.T) {
	wd, err := os.Getwd() // cmd/auditfixture: not the checkout's root
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-tries", "0"}, "-tries 0: want 1..10"},
		{[]string{"-tries", "11"}, "-tries 11: want 1..10"},
		{nil, "run it from the root of the idemlab checkout"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("in %s, run(%q) = %d, stderr %q; want 2 and %q", wd, c.args, code, errOut.String(), c.want)
		}
	}
}

// Ensure -h prints the help on stdout and exits 0: the synopsis, every
// flag with its range and default, and the exit statuses.
func TestRunHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-h"}, &out, &errOut); code != 0 || errOut.Len() != 0 {
		t.Fatalf("run(-h) = %d, stderr %q; want 0 and nothing", code, errOut.String())
	}
	for _, want := range []string{"usage: go run ./cmd/auditfixture [-out DIR] [-tries N]\n", "\nFlags:\n  -derive ", "\n  -out DIR ",
		"(default " + DefaultOut + ")", "  -tries N ", "(1..10; default 3)", "\nExit status:\n  0  the fixture was written\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h lacks %q:\n%s", want, out.String())
		}
	}
}

// Ensure a target's stand-in holds its target.json and lock file, byte
// for byte, and a README, never its program.
func TestWriteTarget(t *testing.T) {
	from, to := t.TempDir(), filepath.Join(t.TempDir(), "t")
	for name, data := range map[string]string{"target.json": "{}\n", "package-lock.json": "{\"lock\": 1}\n", "app.js": "x\n", "node_modules/m/index.js": "y\n"} {
		if err := writeFile(filepath.Join(from, filepath.FromSlash(name)), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeTarget(from, to); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(to, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(to, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	})
	if want := "README.md package-lock.json target.json"; strings.Join(got, " ") != want {
		t.Errorf("wrote %v, want %s", got, want)
	}
	for _, name := range []string{"target.json", "package-lock.json"} {
		a, _ := os.ReadFile(filepath.Join(from, name))
		b, _ := os.ReadFile(filepath.Join(to, name))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: %q, want the target's %q", name, b, a)
		}
	}
}

// Ensure a cut is gapless only when its intents are 0..n-1.
func TestGapless(t *testing.T) {
	for _, c := range []struct {
		history string
		want    bool
	}{
		{`{"kind":"run"}` + "\n" + `{"kind":"attempt","intent":0}` + "\n" + `{"kind":"attempt","intent":1}` + "\n", true},
		{`{"kind":"attempt","intent":0}` + "\n" + `{"kind":"attempt","intent":2}` + "\n", false},
		{`{"kind":"run"}` + "\n", false},
	} {
		if got := gapless([]byte(c.history)); got != c.want {
			t.Errorf("gapless(%q) = %v, want %v", c.history, got, c.want)
		}
	}
}

package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Ensure the audit shares no code with the lab: the only idemlab packages
// it links are its own (internal/audit and the packages below it, such as
// its DSSE), so a mistake in the lab cannot hide from it; and its tests
// import none either (their fixture is files the runner wrote, not the
// runner's code), but fixture_regen_test.go, which writes that fixture by
// running the runner and rewrites it with the lab's own code. The one
// other it may link is internal/flaghelp, which lays out -h text, holds no
// lab logic and imports only the standard library (its own test says so).
func TestAuditImportsNoLabPackage(t *testing.T) {
	pkgs := []string{"."}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if name == "fixture_regen_test.go" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "idemlab/") {
				pkgs = append(pkgs, p)
			}
		}
	}
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", strings.Join(pkgs, " "), err)
	}
	for _, p := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case !strings.HasPrefix(p, "idemlab/"), p == "idemlab/cmd/audit", p == "idemlab/internal/audit", p == "idemlab/internal/flaghelp",
			strings.HasPrefix(p, "idemlab/internal/audit/"):
		default:
			t.Errorf("cmd/audit or its tests link %s: the audit must re-derive what it checks with its own code", p)
		}
	}
}

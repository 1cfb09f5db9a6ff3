package docs

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Ensure each command's package comment (what go doc shows) says what the
// command does and sends the reader to its -h for the rest: the synopsis
// and the exit statuses are written once, in the help the command prints,
// so no copy can drift from it.
func TestCommandDocsPointToHelp(t *testing.T) {
	mains, err := filepath.Glob(filepath.Join("..", "cmd", "*", "main.go"))
	if err != nil || len(mains) == 0 {
		t.Fatalf("no ../cmd/*/main.go (%v)", err)
	}
	restated := regexp.MustCompile(`(?im)^\s*(usage|exit status(es)?):?\s*$|^\s*usage: `)
	for _, path := range mains {
		name := filepath.Base(filepath.Dir(path))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		doc := f.Doc.Text()
		pointer := regexp.MustCompile("Run `(go run \\./cmd/)?" + name + " -h` for its usage, flags and exit statuses")
		if !pointer.MatchString(strings.Join(strings.Fields(doc), " ")) {
			t.Errorf("cmd/%s's package comment does not say \"Run `%s -h` for its usage, flags and exit statuses\"", name, name)
		}
		if m := restated.FindString(doc); m != "" {
			t.Errorf("cmd/%s's package comment restates its -h: %q", name, strings.TrimSpace(m))
		}
	}
}

package digest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// write creates the files of tree (slash path to content) below root.
func write(t *testing.T, root string, tree map[string]string) {
	t.Helper()
	for name, data := range tree {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// errorIs reports whether err is the error want words ("" for none),
// failing t if not; true means the call succeeded as wanted and its result
// is the one to check.
func errorIs(t *testing.T, call string, err error, want string) bool {
	t.Helper()
	if got := fmt.Sprint(err); err == nil && want != "" || err != nil && got != want {
		t.Errorf("%s error = %v, want %q", call, err, want)
		return false
	}
	return err == nil
}

// Ensure the source rule keeps what can change a result and drops tests,
// fixtures, what a target's setup makes and anything outside the source
// folders.
func TestIsSource(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"go.mod", true},
		{"go.sum", true},
		{"internal/registry/registry.go", true},
		{"cases/10-x.json", true},
		{"targets/x/app.js", true},
		{"internal/registry/registry_test.go", false},
		{"cmd/audit/testdata/pass.ct", false},
		{"internal/x/testdata/fuzz/FuzzY/abc", false},
		{"targets/x/node_modules/express/index.js", false},
		{"targets/x/.idemlab-setup", false},
		{"targets/x/.idemlab-setup.lock", false},
		{"README.md", false},
		{"evidence/x.go", false},
		{"cmd", false},
	}
	for _, tt := range tests {
		if got := IsSource(tt.path); got != tt.want {
			t.Errorf("IsSource(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// Ensure the source rule: go.mod, go.sum and the regular files under
// cmd/, internal/, cases/, schema/ and targets/, without _test.go files,
// testdata or node_modules, sorted; a symlink is refused, never followed.
func TestSourceFiles(t *testing.T) {
	tests := []struct {
		name    string
		tree    map[string]string
		link    string // a symlink to create, "" for none
		want    []string
		refused []string
	}{
		{
			name: "rule",
			tree: map[string]string{
				"go.mod": "module m\n", "go.sum": "", "README.md": "x", "evidence/x.go": "x",
				"cmd/fake/main.go": "x", "internal/a/b.go": "x", "internal/a/b_test.go": "x", "internal/a/testdata/b.go": "x",
				"cases/10-a.json": "{}", "schema/case.schema.json": "{}",
				"targets/t/app.js": "x", "targets/t/node_modules/m/index.js": "x", "targets/t/.idemlab-setup": "d",
			},
			want: []string{"go.mod", "go.sum", "cmd/fake/main.go", "internal/a/b.go", "cases/10-a.json", "schema/case.schema.json", "targets/t/app.js"},
		},
		{
			name: "what a target's setup builds, its .gitignore names",
			tree: map[string]string{
				"go.mod":                     "module m\n",
				"targets/g/.gitignore":       "# built\n/harness\nout/\n",
				"targets/g/main.go":          "x",
				"targets/g/harness":          "a binary",
				"targets/g/sub/harness":      "not the anchored one",
				"targets/g/out/x.bin":        "x",
				"targets/h/harness":          "another folder's .gitignore does not reach it",
				"internal/a/harness":         "x",
				"internal/a/.gitignore":      "/harness\n",
				"targets/g/out-of-scope.txt": "x",
			},
			want: []string{"go.mod", "internal/a/.gitignore", "internal/a/harness", "targets/g/.gitignore", "targets/g/main.go",
				"targets/g/out-of-scope.txt", "targets/g/sub/harness", "targets/h/harness"},
		},
		{
			name:    "symlink",
			tree:    map[string]string{"go.mod": "module m\n", "internal/a/b.go": "x"},
			link:    "internal/a/c.go",
			want:    []string{"go.mod", "internal/a/b.go"},
			refused: []string{"internal/a/c.go"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, tt.tree)
			if tt.link != "" {
				if err := os.Symlink("/etc/passwd", filepath.Join(root, tt.link)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := SourceFiles(root)
			refused, _ := err.(*RefusedError)
			if err != nil && refused == nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("SourceFiles() = %q, want %q", got, tt.want)
			}
			if refused != nil && !slices.Equal(refused.Paths, tt.refused) || refused == nil && tt.refused != nil {
				t.Errorf("SourceFiles() error = %v, want %q refused", err, tt.refused)
			}
		})
	}
}

// Ensure a source's hash folds CRLF to LF and nothing else.
func TestSourceHash(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{"a\r\nb\r\n", "a\nb\n", true},
		{"a\rb", "ab", false},
		{"a\rb", "a\nb", false},
	}
	for _, tt := range tests {
		if got := SourceHash([]byte(tt.a)) == SourceHash([]byte(tt.b)); got != tt.same {
			t.Errorf("SourceHash(%q) == SourceHash(%q) is %v, want %v", tt.a, tt.b, got, tt.same)
		}
	}
}

// Ensure Sources hashes the sources only, CRLF folded before hashing, so a
// Windows checkout hashes as the committed LF bytes do.
func TestSourcesFoldCRLF(t *testing.T) {
	hashes := map[string]map[string]string{}
	for name, text := range map[string]string{"lf": "a\nb\n", "crlf": "a\r\nb\r\n"} {
		dir := t.TempDir()
		write(t, dir, map[string]string{"go.mod": "module m\n", "internal/x/x.go": text, "internal/x/x_test.go": "t", "internal/x/testdata/f": "f"})
		got, err := Sources(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got["internal/x/x.go"] == "" || got["go.mod"] == "" {
			t.Fatalf("Sources(%s) = %v, want go.mod and internal/x/x.go only", name, got)
		}
		hashes[name] = got
	}
	if hashes["lf"]["internal/x/x.go"] != hashes["crlf"]["internal/x/x.go"] {
		t.Fatal("CRLF and LF copies hash differently")
	}
}

// Ensure a folder's digest covers every regular file by path and content,
// leaves out what setup makes and version control, and refuses anything it
// cannot name byte for byte.
func TestFolder(t *testing.T) {
	base := map[string]string{"t/app.js": "x", "t/lib/a.js": "a"}
	tests := []struct {
		name    string
		tree    map[string]string
		special func(dir string) error // makes a file that is not regular
		same    bool                   // the digest of base
		wantErr string
	}{
		{name: "base", same: true},
		{name: "skipped", tree: map[string]string{"t/node_modules/m/i.js": "m", "t/.idemlab-setup": "d", "t/.idemlab-setup.lock": "", "t/.git/HEAD": "h"}, same: true},
		{name: "edited", tree: map[string]string{"t/app.js": "y"}},
		{name: "added", tree: map[string]string{"t/.idemlab-setup-old": "d"}},
		{name: "copied", tree: map[string]string{"t/lib/b.js": "a"}},
		{name: "symlink", special: func(dir string) error { return os.Symlink("/etc/passwd", filepath.Join(dir, "link")) },
			wantErr: "link: a symbolic link (refused: the audit reads only regular files inside its folders)"},
		{name: "fifo", special: func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, "lib", "fifo"), 0o644) },
			wantErr: "lib/fifo: not a regular file"},
		{name: "bytes", special: func(dir string) error { return os.Truncate(filepath.Join(dir, "app.js"), MaxFolderBytes) },
			wantErr: "more than 67108864 bytes"}, // with lib/a.js
		{name: "files", special: func(dir string) error {
			for i := range MaxFolderFiles - 1 { // with app.js and lib/a.js
				if err := os.WriteFile(filepath.Join(dir, "lib", fmt.Sprint(i)), nil, 0o644); err != nil {
					return err
				}
			}
			return nil
		}, wantErr: "more than 10000 files"},
	}
	digestOf := func(t *testing.T, tree map[string]string, special func(string) error) (string, error) {
		t.Helper()
		root := t.TempDir()
		write(t, root, base)
		write(t, root, tree)
		if special != nil {
			if err := special(filepath.Join(root, "t")); err != nil {
				t.Fatal(err)
			}
		}
		return Folder(root, "t")
	}
	want, err := digestOf(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := digestOf(t, tt.tree, tt.special)
			if errorIs(t, "Folder()", err, tt.wantErr) && (got == want) != tt.same {
				t.Errorf("Folder() = %s, base %s: same is %v, want %v", got, want, got == want, tt.same)
			}
		})
	}
}

// Ensure the folder's .gitignore leaves out what its patterns name (what
// a setup builds there), and nothing else; a pattern it cannot read as git
// does is refused.
func TestFolderIgnore(t *testing.T) {
	tests := []struct {
		name, ignore string
		tree         map[string]string // added to app.js, lib/a.js and the .gitignore
		same         bool              // the digest without tree
		wantErr      string
	}{
		{name: "anchored", ignore: "/service\n", tree: map[string]string{"t/service": "binary"}, same: true},
		{name: "anchored elsewhere", ignore: "/service\n", tree: map[string]string{"t/lib/service": "binary"}},
		{name: "any depth", ignore: "# built\n\n*.o\nbuild/\n", tree: map[string]string{"t/x.o": "o", "t/lib/y.o": "o", "t/build/z": "z", "t/lib/build/z": "z"}, same: true},
		{name: "folder only", ignore: "build/\n", tree: map[string]string{"t/build": "a file"}},
		{name: "path", ignore: "lib/*.tmp\n", tree: map[string]string{"t/lib/a.tmp": "x"}, same: true},
		{name: "path elsewhere", ignore: "lib/*.tmp\n", tree: map[string]string{"t/x/lib/a.tmp": "x"}},
		{name: "negation", ignore: "*.o\n!keep.o\n", wantErr: `.gitignore:2: "!keep.o": want a name or path, *, ? and [..] only (docs/targets.md)`},
		{name: "double star", ignore: "**/x\n", wantErr: `.gitignore:1: "**/x": want a name or path, *, ? and [..] only (docs/targets.md)`},
		{name: "bad", ignore: "[\n", wantErr: `.gitignore:1: "[": want a name or path, *, ? and [..] only (docs/targets.md)`},
		{name: "large", ignore: strings.Repeat("x\n", MaxIgnoreBytes), wantErr: ".gitignore: 8192 bytes, over the cap of 4096 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, map[string]string{"t/app.js": "x", "t/lib/a.js": "a", "t/.gitignore": tt.ignore})
			before, err := Folder(root, "t")
			if tt.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			write(t, root, tt.tree)
			got, err := Folder(root, "t")
			if errorIs(t, "Folder()", err, tt.wantErr) && (got == before) != tt.same {
				t.Errorf("Folder() with %q = %s, without %s: same is %v, want %v", sortedKeys(tt.tree), got, before, got == before, tt.same)
			}
		})
	}
}

// sortedKeys are m's keys in order.
func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// Ensure goPins, which reads a go.mod or go.sum from someone else's folder,
// never panics, and reads back every version it pinned from require lines.
func FuzzGoPins(f *testing.F) {
	f.Add(goMod)
	f.Add(goSum)
	f.Add("require (\n\tx v1 // c\n)\nreplace (\n\tx => y v2\n)\nrequire ) (\n")
	f.Fuzz(func(t *testing.T, text string) {
		goPins(text, true)
		pins := goPins(text, false)
		var again strings.Builder
		for m, v := range pins {
			if v != "" {
				fmt.Fprintf(&again, "require %s %s\n", m, v)
			}
		}
		got := goPins(again.String(), false)
		for m, v := range pins {
			if v != "" && got[m] != v {
				t.Errorf("pins %s %s, read back as %q from %q", m, v, got[m], again.String())
			}
		}
		if len(got) > len(pins) {
			t.Errorf("read back %d pins from %q, want %d", len(got), again.String(), len(pins))
		}
	})
}

// Ensure the digest's bytes: the SHA-256 of a line "PATH\x00SHA256\n" per
// file, in byte order of the path ("a-c" before "a/b", though a walk meets
// a/ first). Worked out by hand with
//
//	printf 'a-c\0%s\na/b\0%s\n' $(printf 2 | sha256sum | cut -c1-64) $(printf 1 | sha256sum | cut -c1-64) | sha256sum
func TestFolderBytes(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{"t/a/b": "1", "t/a-c": "2"})
	got, err := Folder(root, "t")
	if want := "453d5c2fae0207709f1cb444bb49451ffca7607a5d919fa0044c4b166ab0f240"; err != nil || got != want {
		t.Errorf("Folder() = %s, %v, want %s", got, err, want)
	}
}

// A go.mod and a go.sum as a Go target's folder holds them.
const (
	goMod = `module example.com/t // a comment

go 1.26

require github.com/gofiber/fiber/v2 v2.52.15

require (
	github.com/google/uuid v1.6.0 // indirect
	example.com/forked v1.0.0
)

replace example.com/forked => ../forked
`
	goSum = `github.com/gofiber/fiber/v2 v2.52.15 h1:Cov1uKeVPyu9q0jSrN60W+A8XNX+/WK8J7cy5osHLIk=
github.com/gofiber/fiber/v2 v2.52.15/go.mod h1:YEcBbO/FB+5M1IZNBP9FO3J9281zgPAreiI1oqg8nDw=
github.com/google/uuid v1.5.0/go.mod h1:TIyPZe4MgqvfeYDBFedMoGGpEw/LqOeaOT+nhxU+yHo=
github.com/google/uuid v1.6.0 h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=
example.com/twice v1.0.0 h1:x
example.com/twice v1.1.0 h1:y
`
)

// Ensure the versions come from the lock file: a package-lock.json's
// package, a go.mod's require line, a go.sum's one module version; and a
// package it does not pin (a replaced module, a module at two versions), or
// a lock file of the first version, is an error.
func TestLibraries(t *testing.T) {
	npm := []string{"express", "@scope/lib"}
	goModules := []string{"github.com/gofiber/fiber/v2", "github.com/google/uuid"}
	tests := []struct {
		name, lock, data string
		packages         []string // npm's when nil
		want             []Library
		wantErr          string
	}{
		{name: "go.mod", lock: "go.mod", packages: goModules,
			want: []Library{{"github.com/gofiber/fiber/v2", "v2.52.15"}, {"github.com/google/uuid", "v1.6.0"}}},
		{name: "go.sum", lock: "go.sum", packages: goModules[:1], want: []Library{{"github.com/gofiber/fiber/v2", "v2.52.15"}}},
		{name: "go.sum twice", lock: "go.sum", packages: []string{"example.com/twice"},
			wantErr: "t/go.sum pins no version of example.com/twice"},
		{name: "replaced", lock: "go.mod", packages: []string{"example.com/forked"}, wantErr: "t/go.mod pins no version of example.com/forked"},
		{name: "go.mod unpinned", lock: "go.mod", packages: []string{"example.com/t"}, wantErr: "t/go.mod pins no version of example.com/t"},
		{name: "pinned", lock: "package-lock.json",
			data: `{"lockfileVersion": 3, "packages": {"": {}, "node_modules/express": {"version": "4.21.2"}, "node_modules/@scope/lib": {"version": "1.0.11"}}}`,
			want: []Library{{"express", "4.21.2"}, {"@scope/lib", "1.0.11"}}},
		{name: "no lock", want: []Library{}},
		{name: "unpinned", lock: "package-lock.json", data: `{"lockfileVersion": 3, "packages": {}}`,
			wantErr: "t/package-lock.json pins no version of express"},
		{name: "version 1", lock: "package-lock.json", data: `{"lockfileVersion": 1, "dependencies": {}}`,
			wantErr: "t/package-lock.json: lockfileVersion 1, want 2 or 3"},
		{name: "missing", lock: "other.json", wantErr: "t/other.json: no such file or directory"},
		{name: "folder", lock: "..", wantErr: "t/..: not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, map[string]string{"t/package-lock.json": tt.data, "t/go.mod": goMod, "t/go.sum": goSum})
			packages := tt.packages
			if packages == nil {
				packages = npm
			}
			got, err := Libraries(root, "t", tt.lock, packages)
			if errorIs(t, "Libraries()", err, tt.wantErr) && (got == nil || !slices.Equal(got, tt.want)) {
				t.Errorf("Libraries() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Ensure a file is read only if regular, not through a symlink, and not
// over its cap.
func TestCopyFile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"f": "12345"})
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		limit         int64
		want, wantErr string // what is copied, or why not
	}{
		{"f", 5, "12345", ""},
		{"f", 4, "", "5 bytes, over the cap of 4 bytes"},
		{"l", 5, "", ErrSymlink.Error()},
		{"p", 5, "", ErrNotRegular.Error()},
		{".", 5, "", ErrNotRegular.Error()},
		{"missing", 5, "", "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.name, tt.limit), func(t *testing.T) {
			var b strings.Builder
			_, err := copyFile(&b, filepath.Join(dir, tt.name), tt.limit)
			if errorIs(t, "copyFile()", err, tt.wantErr) && b.String() != tt.want {
				t.Errorf("copyFile() copied %q, want %q", b.String(), tt.want)
			}
		})
	}
}

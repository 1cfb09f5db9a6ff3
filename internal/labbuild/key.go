package labbuild

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// goEnvNames are the go command's settings in the key: the toolchain, the
// target and whatever changes the code it produces; GOEXE names the program.
var goEnvNames = []string{
	"GOVERSION", "GOOS", "GOARCH", "GOEXE",
	"GO386", "GOAMD64", "GOARM", "GOARM64", "GOMIPS", "GOMIPS64",
	"GOPPC64", "GORISCV64", "GOWASM",
	"GOEXPERIMENT", "GOFIPS140",
}

// goEnv asks the go command, run as the build will run it, for goEnvNames:
// this program's runtime may be another toolchain.
func goEnv(ctx context.Context, goCmd, root string, env []string) (map[string]string, error) {
	cmd := exec.CommandContext(ctx, goCmd, append([]string{"env", "-json"}, goEnvNames...)...)
	cmd.Dir, cmd.Env = root, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w\n%s", err, strings.TrimRight(stderr.String(), "\n"))
	}
	m := map[string]string{}
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	if m["GOVERSION"] == "" {
		return nil, fmt.Errorf("go env: no GOVERSION")
	}
	return m, nil
}

// keyInputs returns the text whose hash is the cache key of pkg: one line
// per input, sorted, so two keys can be compared with diff.
func keyInputs(root, pkg string, goenv map[string]string) (string, error) {
	mod, err := readGoMod(root)
	if err != nil {
		return "", err
	}
	dir, err := pkgDir(root, pkg)
	if err != nil {
		return "", err
	}
	s := &sourceSet{root: root, modPath: mod.path, files: map[string]string{}, seen: map[string]bool{}}
	if err := s.hash("go.mod", filepath.Join(root, "go.mod")); err != nil {
		return "", err
	}
	if err := s.hash("go.sum", filepath.Join(root, "go.sum")); err != nil && !os.IsNotExist(err) {
		return "", err
	}
	if err := s.walkImports(dir); err != nil {
		return "", err
	}
	for _, r := range mod.localReplace {
		dir := r
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(root, r)
		}
		keep := func(name string) bool { return isSource(name) || name == "go.mod" || name == "go.sum" }
		if err := s.tree("replace "+filepath.ToSlash(r), dir, false, keep); err != nil {
			return "", err
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "labbuild key v1\npackage %s\n", pkg)
	fmt.Fprintf(&b, "flags %s\nenv %s\n", strings.Join(Flags, " "), strings.Join(Env, " "))
	var env []string
	for _, k := range goEnvNames {
		env = append(env, "goenv "+k+"="+goenv[k]+"\n")
	}
	slices.Sort(env)
	b.WriteString(strings.Join(env, ""))
	for _, name := range slices.Sorted(maps.Keys(s.files)) {
		fmt.Fprintf(&b, "file %s %s\n", name, s.files[name])
	}
	return b.String(), nil
}

// A sourceSet collects the key's files, by slash name, with their SHA-256.
type sourceSet struct {
	root    string
	modPath string
	files   map[string]string // name → hex SHA-256, or "missing"
	seen    map[string]bool   // package folders visited
}

func (s *sourceSet) hash(name, file string) error {
	sum, err := hashFile(file)
	if err != nil {
		return err
	}
	s.files[name] = sum
	return nil
}

// rel names file by its path below the module root.
func (s *sourceSet) rel(file string) string {
	r, err := filepath.Rel(s.root, file)
	if err != nil {
		return filepath.ToSlash(file)
	}
	return filepath.ToSlash(r)
}

// walkImports adds the package in dir and every module package it imports.
func (s *sourceSet) walkImports(dir string) error {
	queue := []string{filepath.Clean(dir)}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		if s.seen[dir] {
			continue
		}
		s.seen[dir] = true
		imports, err := s.pkg(dir)
		if err != nil {
			return err
		}
		for _, imp := range imports {
			if rel, ok := inModule(imp, s.modPath); ok {
				queue = append(queue, filepath.Join(s.root, filepath.FromSlash(rel)))
			}
		}
	}
	return nil
}

// pkg adds the source files of the package in dir and returns its imports;
// what is missing or does not parse is left for go build to report.
func (s *sourceSet) pkg(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		s.files[s.rel(dir)+"/"] = "missing"
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var imports []string
	embeds := false
	for _, e := range entries {
		file := filepath.Join(dir, e.Name())
		if !isSource(e.Name()) || !isFile(file, e) {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		s.files[s.rel(file)] = hashBytes(data)
		if !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		embeds = embeds || bytes.Contains(data, []byte("//go:embed"))
		f, err := parser.ParseFile(token.NewFileSet(), file, data, parser.ImportsOnly)
		if err != nil {
			continue
		}
		for _, is := range f.Imports {
			if p, err := strconv.Unquote(is.Path.Value); err == nil {
				imports = append(imports, p)
			}
		}
	}
	if embeds {
		// //go:embed may name any file below the package, hidden ones
		// included with "all:"; hash them all rather than read patterns.
		if err := s.tree(s.rel(dir), dir, true, func(string) bool { return true }); err != nil {
			return nil, err
		}
	}
	return imports, nil
}

// tree adds every file below dir that keep accepts, named under prefix,
// skipping nested modules and, unless all, what the go command skips.
func (s *sourceSet) tree(prefix, dir string, all bool, keep func(name string) bool) error {
	return filepath.WalkDir(dir, func(file string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			n := e.Name()
			skip := !all && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_"))
			if file != dir && (skip || exists(filepath.Join(file, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !keep(e.Name()) || !isFile(file, e) {
			return nil
		}
		r, err := filepath.Rel(dir, file)
		if err != nil {
			return err
		}
		return s.hash(prefix+"/"+filepath.ToSlash(r), file)
	})
}

// isSource reports whether the go command may compile or link a file of
// this name into a package built with CGO_ENABLED=0.
func isSource(name string) bool {
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || strings.HasSuffix(name, "_test.go") {
		return false
	}
	switch filepath.Ext(name) {
	case ".go", ".s", ".S", ".h", ".syso":
		return true
	}
	return false
}

// isFile reports whether file is a regular file, or a link to one (the go
// command follows links to files).
func isFile(file string, e fs.DirEntry) bool {
	if e.Type().IsRegular() {
		return true
	}
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	fi, err := os.Stat(file)
	return err == nil && fi.Mode().IsRegular()
}

func exists(file string) bool {
	_, err := os.Stat(file)
	return err == nil
}

// goMod is what the key needs from go.mod: the module path and the replace
// directives' local folders.
type goMod struct {
	path         string
	localReplace []string
}

func readGoMod(root string) (goMod, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return goMod{}, err
	}
	return parseGoMod(data)
}

// parseGoMod reads the module line and the replace directives (single-line
// or block) of a go.mod; the go command validates the rest when it builds.
func parseGoMod(data []byte) (goMod, error) {
	var m goMod
	inReplace := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case inReplace && f[0] == ")":
			inReplace = false
			continue
		case inReplace:
		case f[0] == "module" && len(f) == 2:
			m.path = unquote(f[1])
			continue
		case f[0] == "replace" && len(f) == 2 && f[1] == "(":
			inReplace = true
			continue
		case f[0] == "replace":
			f = f[1:]
		default:
			continue
		}
		// f is one replace spec: old [version] => new [version].
		i := slices.Index(f, "=>")
		if i < 0 || i+1 >= len(f) {
			continue
		}
		if to := unquote(f[i+1]); len(f) == i+2 && isLocalPath(to) {
			m.localReplace = append(m.localReplace, filepath.FromSlash(to))
		}
	}
	if m.path == "" {
		return goMod{}, fmt.Errorf("go.mod: no module line")
	}
	return m, sc.Err()
}

// isLocalPath is the go command's rule for a replacement that is a folder.
func isLocalPath(p string) bool {
	return p == "." || p == ".." || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../") ||
		strings.HasPrefix(p, `.\`) || strings.HasPrefix(p, `..\`) || filepath.IsAbs(p)
}

func unquote(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

func hashFile(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

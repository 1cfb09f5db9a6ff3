package audit

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SourceDirs are the folders whose regular files are sources, besides
// go.mod and go.sum: not _test.go files, nothing below testdata or
// node_modules (a target's setup makes it), no setup marker.
var SourceDirs = []string{"cmd", "internal", "cases", "schema", "targets"}

// A RefusedError lists the sources that are not regular files.
type RefusedError struct{ Paths []string }

// Error names the refused paths.
func (e *RefusedError) Error() string {
	return "not regular files (refused): " + strings.Join(e.Paths, ", ")
}

// SourceFiles lists the checkout's sources as sorted slash paths; those
// that are not regular files are never followed but named in a
// *RefusedError returned with the list.
func SourceFiles(root string) ([]string, error) {
	var out, refused []string
	for _, f := range []string{"go.mod", "go.sum"} {
		fi, err := os.Lstat(filepath.Join(root, f))
		switch {
		case err != nil:
		case fi.Mode().IsRegular():
			out = append(out, f)
		default:
			refused = append(refused, f)
		}
	}
	for _, dir := range SourceDirs {
		base := filepath.Join(root, dir)
		fi, err := os.Lstat(base)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil || !fi.IsDir() {
			refused = append(refused, dir)
			continue
		}
		err = filepath.WalkDir(base, func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, name)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if name != base && (d.Name() == "testdata" || d.Name() == "node_modules") {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(d.Name(), "_test.go") || strings.HasPrefix(d.Name(), ".idemlab-setup") {
				return nil
			}
			if !d.Type().IsRegular() {
				refused = append(refused, rel)
				return nil
			}
			out = append(out, rel)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(refused) > 0 {
		return out, &RefusedError{refused}
	}
	return out, nil // WalkDir visits in lexical order; dirs are in fixed order
}

// SourceHash is the SHA-256 (hex) of data with every CRLF folded to LF.
func SourceHash(data []byte) string {
	return sha256Hex(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")))
}

// checkSources verifies manifest.sources against the checkout.
func (a *auditor) checkSources() {
	listed := stringMap(a.manifest, "sources")
	reported := map[string]bool{}
	for _, p := range sortedKeys(listed) {
		a.check()
		data, err := readInside(a.opts.Root, p, CapSource)
		switch {
		case errors.Is(err, os.ErrNotExist):
			a.failf(CheckSource, "source %s: missing from the checkout", p)
			continue
		case err != nil:
			a.failf(CheckSource, "source %s: %v", p, unwrapPath(err))
			reported[p] = true
			continue
		case !isSourcePath(p):
			a.failf(CheckSource, "source %s: not a source path (go.mod, go.sum, or a non-test file under %s)", p, strings.Join(SourceDirs, "/, ")+"/")
			continue
		}
		if SourceHash(data) != listed[p] {
			a.failf(CheckSource, "source %s: SHA-256 does not match the checkout", p)
			continue
		}
		a.report.Sources++
	}
	a.check()
	files, err := SourceFiles(a.opts.Root)
	var refused *RefusedError
	if errors.As(err, &refused) {
		for _, p := range refused.Paths {
			if reported[p] {
				continue
			}
			a.failf(CheckSource, "source %s: not a regular file (a symlink or special file; refused, never followed)", p)
		}
	} else if err != nil {
		a.failf(CheckSource, "sources: cannot list the checkout: %v", err)
		return
	}
	for _, p := range files {
		if _, ok := listed[p]; !ok {
			a.failf(CheckSource, "source %s: not listed in the manifest", p)
		}
	}
	a.checkBuildInputs()
	a.claim("sources")
}

// checkBuildInputs refuses what would change the build from outside the
// hashed sources: a go.work or go.work.sum, a vendor folder, and a replace
// in go.mod by a folder (one by a module version is pinned by go.sum).
func (a *auditor) checkBuildInputs() {
	for _, f := range []string{"go.work", "go.work.sum", "vendor"} {
		a.check()
		if _, err := os.Lstat(filepath.Join(a.opts.Root, f)); err == nil {
			a.failf(CheckSource, "%s: present in the checkout: it can change what is built and is not among the hashed sources (remove it)", f)
		}
	}
	a.check()
	data, err := readInside(a.opts.Root, "go.mod", CapSource)
	if err != nil {
		return // reported as a source
	}
	for _, r := range localReplaces(string(data)) {
		a.failf(CheckSource, "go.mod: %s: replaces a module by a folder whose files are not hashed (refused)", r)
	}
}

// localReplaces returns go.mod's replace directives by a file system path.
func localReplaces(gomod string) []string {
	var out []string
	for _, line := range strings.Split(gomod, "\n") {
		line, _, _ = strings.Cut(line, "//")
		spec := strings.TrimSpace(line) // in a replace block, or after "replace"
		if rest, ok := strings.CutPrefix(spec, "replace"); ok && strings.TrimLeft(rest, " \t") != rest {
			spec = strings.TrimSpace(rest)
		}
		_, target, ok := strings.Cut(spec, "=>") // only a replace has one
		t := strings.Trim(strings.TrimSpace(target), "\"`")
		if ok && (strings.HasPrefix(t, "./") || strings.HasPrefix(t, "../") || strings.HasPrefix(t, "/") ||
			t == "." || t == ".." || filepath.VolumeName(t) != "" || strings.HasPrefix(t, `.\`) || strings.HasPrefix(t, `..\`)) {
			out = append(out, "replace "+spec)
		}
	}
	return out
}

package evidence

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// SourceRoots are the checkout's files and folders that can change a
// result (below a folder, as IsSource says).
var SourceRoots = []string{"go.mod", "go.sum", "cmd", "internal", "cases", "schema", "targets"}

// IsSource reports whether a slash path relative to the checkout root is a
// source by the rule the audit also applies: below a source folder, every
// regular file except *_test.go, anything in a testdata or node_modules
// folder, and a target's setup marker (.idemlab-setup*).
func IsSource(rel string) bool {
	parts := strings.Split(rel, "/")
	base := parts[len(parts)-1]
	if strings.HasSuffix(base, "_test.go") || strings.HasPrefix(base, ".idemlab-setup") {
		return false
	}
	for _, p := range parts[:len(parts)-1] {
		if p == "testdata" || p == "node_modules" {
			return false
		}
	}
	return true
}

// Sources hashes every source file under root: slash path to the SHA-256 of
// its bytes with CRLF folded to LF, so a Windows checkout hashes the same.
func Sources(root string) (map[string]string, error) {
	out := map[string]string{}
	for _, top := range SourceRoots {
		if _, err := os.Lstat(filepath.Join(root, top)); errors.Is(err, fs.ErrNotExist) {
			continue // a module without dependencies has no go.sum
		}
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir // a target's setup made it: not a source
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if !IsSource(rel) {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[rel] = SHA256(bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n")))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("hash sources: %w", err)
		}
	}
	return out, nil
}

// GitState returns the checkout's HEAD commit and whether any source differs
// from it. Outside git the commit is "unknown" and the tree counts as dirty.
func GitState(root string) GitCheckout {
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return GitCheckout{Commit: "unknown", Dirty: true}
	}
	g := GitCheckout{Commit: strings.TrimSpace(string(head)), Dirty: true}
	args := append([]string{"-C", root, "status", "--porcelain", "--"}, SourceRoots...)
	status, err := exec.Command("git", args...).Output()
	if err == nil {
		g.Dirty = len(bytes.TrimSpace(status)) > 0
	}
	return g
}

// CheckOutsideSources refuses an evidence folder out that is the checkout
// itself or inside its sources (not in a testdata folder): later runs
// would hash the evidence as sources, and the audit find them changed.
// Both paths are compared with their symlinks resolved.
func CheckOutsideSources(root, out string) error {
	r, err := resolve(root)
	if err != nil {
		return fmt.Errorf("checkout %s: %w", root, err)
	}
	o, err := resolve(out)
	if err != nil {
		return fmt.Errorf("evidence folder %s: %w", out, err)
	}
	rel, err := filepath.Rel(r, o)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil // outside the checkout
	}
	if rel == "." {
		return fmt.Errorf("evidence folder %s is the checkout itself: choose a folder of its own (the default is evidence)", out)
	}
	rel = filepath.ToSlash(rel)
	if top, _, _ := strings.Cut(rel, "/"); slices.Contains(SourceRoots, top) && IsSource(rel+"/"+ManifestName) {
		return fmt.Errorf("evidence folder %s is inside %s, whose files are the lab's sources: the evidence would be hashed as a source by later runs (choose a folder outside it)", out, top)
	}
	return nil
}

// resolve is path made absolute with the symlinks of its longest existing
// prefix resolved; the missing rest is appended as written.
func resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	missing := ""
	for p := abs; ; p = filepath.Dir(p) {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(real, missing), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if filepath.Dir(p) == p {
			return abs, nil
		}
		missing = filepath.Join(filepath.Base(p), missing)
	}
}

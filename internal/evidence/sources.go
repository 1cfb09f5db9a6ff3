package evidence

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"

	"idemlab/internal/audit/digest"
)

// Sources hashes every source file under root, as manifest.json records
// them and the audit re-derives them (digest.Sources).
func Sources(root string) (map[string]string, error) { return digest.Sources(root) }

// GitState returns the checkout's HEAD commit and whether any source differs
// from it. Outside git the commit is "unknown" and the tree counts as dirty.
func GitState(root string) GitCheckout {
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return GitCheckout{Commit: "unknown", Dirty: true}
	}
	g := GitCheckout{Commit: strings.TrimSpace(string(head)), Dirty: true}
	args := append([]string{"-C", root, "status", "--porcelain", "--", "go.mod", "go.sum"}, digest.SourceDirs...)
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
	if top, _, _ := strings.Cut(rel, "/"); digest.IsSource(rel + "/" + ManifestName) {
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

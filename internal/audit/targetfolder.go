package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// digestSkipped are the names a target folder's digest leaves out at any
// depth: what the target's setup makes (node_modules), the setup's marker
// and lock, and version control. They are the lab's exact names: a file
// .idemlab-setup-old is digested.
var digestSkipped = []string{"node_modules", ".idemlab-setup", ".idemlab-setup.lock", ".git"}

// checkTargetFolder re-reads a target's folder in the checkout: its
// target.json is target_json byte for byte, its digest the audit's own,
// and for a target that ran, its lock file pins the libraries. A folder
// outside the checkout (dir empty) is not read: a note says so.
func (a *auditor) checkTargetFolder(name string, tm map[string]any, spec *targetSpec, targetJSON []byte) {
	fail := func(field, format string, args ...any) {
		a.fail(Failure{Check: CheckTarget, Target: name, Field: field,
			Message: fmt.Sprintf("targets.json: target %s: %s: ", name, field) + fmt.Sprintf(format, args...)})
	}
	dir, _ := str(tm, "dir")
	if dir == "" {
		a.note(fmt.Sprintf("target %s ran from a folder outside the checkout (dir empty): its target.json, folder digest and library versions were not re-read", name))
		return
	}
	a.check()
	if !cleanRel(dir) || path.Base(dir) != name {
		fail("dir", "%q is not a clean slash path inside the checkout ending in the target's name", dir)
		return
	}
	switch data, err := readInside(a.opts.Root, dir+"/target.json", CapTargetFile); {
	case err != nil:
		fail("target_json", "cannot re-read %s/target.json in the checkout: %v", dir, unwrapPath(err))
	case !bytes.Equal(data, targetJSON):
		fail("target_json", "differs from %s/target.json in the checkout: %s", dir, firstDiff(data, targetJSON))
	}
	a.check()
	rec, _ := str(tm, "digest")
	switch got, err := folderDigest(a.opts.Root, dir); {
	case err != nil:
		fail("digest", "cannot re-derive it from %s in the checkout: %v", dir, err)
	case got != rec:
		fail("digest", "expected %s (the audit's own digest of %s in the checkout), observed %s", got, dir, rec)
	}
	if skipped, _ := str(tm, "skipped"); skipped != "" {
		return // a skipped target's versions are not read
	}
	a.check()
	libs, err := lockLibraries(a.opts.Root, dir, spec)
	if err != nil {
		fail("libraries", "cannot re-read them: %v", err)
		return
	}
	if w, g := render(libs), render(tm["libraries"]); w != g {
		fail("libraries", "expected %s (as %s/%s pins them), observed %s", clipValue(w), dir, spec.lock, clipValue(g))
	}
}

// folderDigest is the SHA-256 over the target folder root/dir: a line
// "PATH\x00SHA256\n" per regular file, in byte order of its slash path,
// digestSkipped left out. A symlink or other non-regular file is refused,
// and so is a folder over CapFolderFiles files or CapFolderBytes bytes.
func folderDigest(root, dir string) (string, error) {
	base := root
	for _, part := range strings.Split(dir, "/") {
		base = filepath.Join(base, part)
		fi, err := os.Lstat(base)
		switch {
		case err != nil:
			return "", unwrapPath(err)
		case fi.Mode()&os.ModeSymlink != 0:
			return "", fmt.Errorf("%s: %w", dir, errSymlink)
		case !fi.IsDir():
			return "", fmt.Errorf("%s: not a folder", dir)
		}
	}
	type entry struct{ rel, sum string }
	var (
		entries []entry
		total   int64
	)
	var walk func(abs, rel string) error
	walk = func(abs, rel string) error {
		list, err := os.ReadDir(abs)
		if err != nil {
			return err
		}
		for _, e := range list {
			if slices.Contains(digestSkipped, e.Name()) {
				continue
			}
			p, r := filepath.Join(abs, e.Name()), rel+e.Name()
			switch {
			case e.Type()&os.ModeSymlink != 0:
				return fmt.Errorf("%s: %w", r, errSymlink)
			case e.IsDir():
				if err := walk(p, r+"/"); err != nil {
					return err
				}
				continue
			case !e.Type().IsRegular():
				return fmt.Errorf("%s: %w", r, errNotRegular)
			case len(entries) == CapFolderFiles:
				return fmt.Errorf("more than %d files", CapFolderFiles)
			}
			sum, err := hashInside(abs, e.Name(), CapFolderBytes-total)
			if err != nil {
				var big *tooLargeError
				if errors.As(err, &big) {
					return fmt.Errorf("more than %d bytes", CapFolderBytes)
				}
				return fmt.Errorf("%s: %w", r, unwrapPath(err))
			}
			if fi, err := e.Info(); err == nil {
				total += fi.Size()
			}
			entries = append(entries, entry{r, sum})
		}
		return nil
	}
	if err := walk(base, ""); err != nil {
		return "", err
	}
	slices.SortFunc(entries, func(x, y entry) int { return strings.Compare(x.rel, y.rel) })
	h := sha256.New()
	for _, e := range entries {
		io.WriteString(h, e.rel+"\x00"+e.sum+"\n")
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lockLibraries reads the versions of spec's versions.packages from its
// package-lock.json (lockfileVersion 2 or later), as targets.json's
// libraries records them.
func lockLibraries(root, dir string, spec *targetSpec) ([]any, error) {
	out := []any{}
	if spec.lock == "" {
		return out, nil
	}
	rel := dir + "/" + spec.lock
	data, err := readInside(root, rel, CapLockFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", rel, unwrapPath(err))
	}
	v, err := decodeJSON(data, capLockJSON)
	if err != nil {
		return nil, fmt.Errorf("%s: not valid JSON: %v", rel, err)
	}
	doc, _ := v.(map[string]any)
	if n := number(doc["lockfileVersion"]); n < 2 {
		return nil, fmt.Errorf("%s: lockfileVersion %s, want 2 or 3", rel, render(doc["lockfileVersion"]))
	}
	pkgs, _ := doc["packages"].(map[string]any)
	for _, name := range spec.packages {
		p, _ := pkgs["node_modules/"+name].(map[string]any)
		version, _ := str(p, "version")
		if version == "" {
			return nil, fmt.Errorf("%s pins no version of %s", rel, name)
		}
		out = append(out, map[string]any{"name": name, "version": version})
	}
	return out, nil
}

package audit

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"idemlab/internal/audit/digest"
)

// checkTargetFolder re-reads a target's folder in the checkout: its
// target.json is target_json byte for byte, its digest the audit's own,
// and for a target that ran, its lock file pins the libraries. A folder
// outside the checkout (dir empty) is not read: a note and the PASS line
// say so; but a target the checkout ships (targets/NAME/target.json) is
// never taken as one from outside: dir empty would turn off every re-read
// of its folder.
func (a *auditor) checkTargetFolder(name string, tm map[string]any, spec *targetSpec, targetJSON []byte) {
	fail := func(field, format string, args ...any) { a.targetFail(CheckTarget, name, field, format, args...) }
	dir, _ := str(tm, "dir")
	if dir == "" {
		a.check()
		if a.shipsTarget(name) {
			fail("dir", `"" (a folder outside the checkout), but the checkout ships targets/%s/target.json: a shipped target is re-read from its folder, never taken on the runner's word`, name)
			return
		}
		a.outsideTargets = append(a.outsideTargets, name)
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
	switch got, err := digest.Folder(a.opts.Root, dir); {
	case err != nil:
		fail("digest", "cannot re-derive it from %s in the checkout: %v", dir, err)
	case got != rec:
		fail("digest", "expected %s (the audit's own digest of %s in the checkout), observed %s", got, dir, rec)
	}
	if skipped, _ := str(tm, "skipped"); skipped != "" {
		return // a skipped target's versions are not read
	}
	a.check()
	libs, err := digest.Libraries(a.opts.Root, dir, spec.lock, spec.packages)
	if err != nil {
		fail("libraries", "cannot re-read them: %v", err)
		return
	}
	if w, g := render(libs), render(tm["libraries"]); w != g {
		fail("libraries", "expected %s (as %s/%s pins them), observed %s", clipValue(w), dir, spec.lock, clipValue(g))
	}
}

// shippedTargets are the targets the checkout ships: the folders
// targets/NAME holding a target.json (a regular file; a symlink is not
// followed), sorted by name (as os.ReadDir lists them).
func (a *auditor) shippedTargets() []string {
	entries, err := os.ReadDir(filepath.Join(a.opts.Root, "targets"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && a.shipsTarget(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// shipsTarget reports whether the checkout holds targets/NAME/target.json
// as a regular file.
func (a *auditor) shipsTarget(name string) bool {
	if !cleanRel(name) || path.Base(name) != name {
		return false
	}
	fi, err := os.Lstat(filepath.Join(a.opts.Root, "targets", name, "target.json"))
	return err == nil && fi.Mode().IsRegular()
}

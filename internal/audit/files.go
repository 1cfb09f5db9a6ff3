package audit

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// requiredFiles returns the files the selection makes the runner write.
func (a *auditor) requiredFiles() []string {
	var out []string
	if len(a.selCases) > 0 && len(a.selStores) > 0 {
		out = append(out, "results.json", "run.json")
	}
	if len(a.selCases) > 0 && len(a.selTargets) > 0 {
		out = append(out, TargetsFile)
	}
	for _, name := range a.selected("experiments") {
		if i := slices.IndexFunc(experimentFiles, func(e [2]string) bool { return e[0] == name }); i >= 0 {
			out = append(out, experimentFiles[i][1])
		}
	}
	return out
}

// writtenFiles are the files the runner writes for the selection. A listed
// file outside them is no evidence, whatever it says: a NOTES.md claiming
// "no duplicates" fails, and so does a rendering the audit derives.
func (a *auditor) writtenFiles() []string {
	out := a.requiredFiles()
	if slices.Contains(a.selected("experiments"), "chaos") {
		for _, s := range StoreOrder {
			out = append(out, chaosSubject{store: s}.base()+".jsonl")
		}
	}
	return out
}

// writesChaosTarget reports whether p is a chaos history of a target and
// the selection runs chaos (checkChaos ties each to its run).
func (a *auditor) writesChaosTarget(p string) bool {
	sub, ext, ok := subjectOf(p)
	return ok && ext == "jsonl" && sub.target != "" && slices.Contains(a.selected("experiments"), "chaos")
}

// checkFiles verifies manifest.files against the evidence folder: every
// listed file is one the runner writes for the selection, with its
// SHA-256; every file the selection implies is listed; every entry of the
// folder but manifest.json is listed.
func (a *auditor) checkFiles() {
	a.listed = stringMap(a.manifest, "files")
	written := a.writtenFiles()
	for _, p := range sortedKeys(a.listed) {
		a.check()
		switch {
		case !cleanRel(p) || slices.Contains(written, p) || a.writesChaosTarget(p):
		case isDerived(p):
			a.failf(CheckFile, "file %s: listed in the manifest, but the audit derives it from the observations: the runner lists what it observed", p)
		case !a.runnerFile(p):
			a.failf(CheckFile, "file %s: listed in the manifest, but the runner writes no such file (for this selection it writes %s): not evidence", p, strings.Join(written, ", "))
		case p == "run.json":
			a.failf(CheckFile, "file %s: listed in the manifest, but the selection runs no case on a store, and the runner writes it for those only", p)
		}
		if !a.isStreamed(p) { // a chaos history or timeline: hashed as a stream (chaos.go)
			a.hashListed(p, capOf(p))
		}
	}
	for _, p := range a.requiredFiles() {
		a.check()
		if _, ok := a.listed[p]; !ok {
			if _, err := os.Lstat(filepath.Join(a.opts.Evidence, p)); err != nil { // else: "not listed" below
				a.failf(CheckFile, "file %s: required by manifest.selection but missing", p)
			}
		}
	}

	a.check()
	var walk func(dir, prefix string)
	walk = func(dir, prefix string) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			a.failf(CheckFile, "evidence folder: cannot list %s: %v", dir, unwrapPath(err))
			return
		}
		for _, e := range entries {
			rel := prefix + e.Name()
			_, listed := a.listed[rel]
			switch {
			case e.Type()&os.ModeSymlink != 0:
				if !listed { // a listed one was refused above
					a.failf(CheckFile, "file %s: %v", rel, errSymlink)
				}
			case e.IsDir():
				walk(filepath.Join(dir, e.Name()), rel+"/")
			case !e.Type().IsRegular():
				if !listed {
					a.failf(CheckFile, "file %s: %v", rel, errNotRegular)
				}
			case !listed && isDerived(rel):
				a.unlisted = append(a.unlisted, rel) // derived, or not: known at the end (checkUnlisted)
			case !listed && rel != "manifest.json":
				a.failf(CheckFile, "file %s: not listed in the manifest", rel)
			}
		}
	}
	walk(a.opts.Evidence, "")
	a.claim("files")
}

// checkUnlisted reports the unlisted files of the folder the audit does
// not derive for this selection (the envelope aside, which checkSignature
// reads); -write removes them instead, as renderings of another selection.
func (a *auditor) checkUnlisted() {
	for _, rel := range a.unlisted {
		if _, ok := a.derived[rel]; ok || rel == EnvelopeFile {
			continue
		}
		if a.opts.Write {
			if err := os.Remove(filepath.Join(a.opts.Evidence, rel)); err != nil {
				a.writeErr = errors.Join(a.writeErr, err)
			}
			continue
		}
		a.failf(CheckFile, "file %s: not listed in the manifest, and not a file the audit derives for this selection", rel)
	}
}

// keptFiles are the evidence files whose bytes other checks read.
var keptFiles = []string{"results.json", "run.json", RetriesFile, JitterFile, ChaosFile, TargetsFile}

// hashListed checks the listed file p's SHA-256: a kept file's bytes are
// kept, whatever their hash; the others are read as a stream.
func (a *auditor) hashListed(p string, limit int64) {
	var sum string
	var err error
	if slices.Contains(keptFiles, p) {
		var data []byte
		if data, err = readInside(a.opts.Evidence, p, limit); err == nil {
			a.data[p], sum = data, sha256Hex(data)
		}
	} else {
		sum, err = hashInside(a.opts.Evidence, p, limit)
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		a.failf(CheckFile, "file %s: listed in the manifest but missing from the evidence folder", p)
	case err != nil:
		a.failf(CheckFile, "file %s: %v", p, unwrapPath(err))
	case sum != a.listed[p]:
		a.failf(CheckFile, "file %s: SHA-256 does not match the manifest", p)
	default:
		a.report.Files++
	}
}

// evidenceFile returns the bytes of a kept file, if listed and read.
func (a *auditor) evidenceFile(name string) ([]byte, bool) {
	if !slices.Contains(keptFiles, name) {
		panic("audit: evidenceFile(" + name + "): not one of keptFiles, whose bytes checkFiles keeps")
	}
	data, ok := a.data[name]
	return data, ok
}

// release drops the bytes of kept file name, read for the last time.
func (a *auditor) release(name string) { delete(a.data, name) }

func (a *auditor) isListed(name string) bool {
	_, ok := a.listed[name]
	return ok
}

// runnerFile reports whether the runner writes a file called p for some
// selection (the check of the selection reports one it did not write for
// this selection, but for run.json, which checkFiles reports).
func (a *auditor) runnerFile(p string) bool {
	if _, ext, chaos := subjectOf(p); chaos && ext == "jsonl" || slices.Contains([]string{"results.json", "run.json", TargetsFile}, p) {
		return true
	}
	return slices.ContainsFunc(experimentFiles, func(e [2]string) bool { return e[1] == p })
}

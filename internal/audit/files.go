package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"path/filepath"
)

// checkFiles verifies manifest.files against the evidence folder: every
// listed file exists with its SHA-256 (of the exact bytes), every file of
// the folder but manifest.json is listed, and, if needResults, results.json
// is listed.
func (a *auditor) checkFiles(needResults bool) {
	listed := stringMap(a.manifest, "files")
	for _, p := range sortedKeys(listed) {
		a.check()
		if !cleanRel(p) {
			a.failf(CheckFile, "file %s: not a clean relative path", p)
			continue
		}
		data, err := readRegular(filepath.Join(a.opts.Evidence, filepath.FromSlash(p)))
		if err != nil {
			a.failf(CheckFile, "file %s: listed in the manifest but missing from the evidence folder", p)
			continue
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != listed[p] {
			a.failf(CheckFile, "file %s: SHA-256 does not match the manifest", p)
			continue
		}
		a.report.Files++
	}

	a.check()
	unlisted := map[string]bool{}
	if _, ok := listed["results.json"]; !ok && needResults {
		unlisted["results.json"] = true
	}
	_ = filepath.WalkDir(a.opts.Evidence, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(a.opts.Evidence, name)
		if err != nil {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if _, ok := listed[rel]; !ok && rel != "manifest.json" {
			unlisted[rel] = true
		}
		return nil
	})
	for _, p := range sortedKeys(unlisted) {
		a.failf(CheckFile, "file %s: not listed in the manifest", p)
	}
}

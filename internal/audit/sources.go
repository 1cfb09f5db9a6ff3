package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SourceDirs are the folders whose regular files are source files, besides
// go.mod and go.sum; names ending in _test.go and anything below a folder
// named testdata are not sources.
var SourceDirs = []string{"cmd", "internal", "cases", "schema"}

// SourceFiles lists the source files of the checkout at root, as sorted
// slash paths relative to root.
func SourceFiles(root string) ([]string, error) {
	var out []string
	for _, f := range []string{"go.mod", "go.sum"} {
		if fi, err := os.Lstat(filepath.Join(root, f)); err == nil && fi.Mode().IsRegular() {
			out = append(out, f)
		}
	}
	for _, dir := range SourceDirs {
		base := filepath.Join(root, dir)
		if _, err := os.Lstat(base); os.IsNotExist(err) {
			continue
		}
		err := filepath.WalkDir(base, func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name != base && d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() || strings.HasSuffix(d.Name(), "_test.go") {
				return nil
			}
			rel, err := filepath.Rel(root, name)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil // WalkDir visits in lexical order; dirs are in fixed order
}

// SourceHash is the SHA-256 (hex) of data with every CRLF folded to LF.
func SourceHash(data []byte) string {
	sum := sha256.Sum256(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")))
	return hex.EncodeToString(sum[:])
}

// checkSources verifies manifest.sources against the checkout.
func (a *auditor) checkSources() {
	listed := stringMap(a.manifest, "sources")
	for _, p := range sortedKeys(listed) {
		if !cleanRel(p) {
			a.failf(CheckSource, "source %s: not a clean relative path", p)
			continue
		}
		data, err := readRegular(filepath.Join(a.opts.Root, filepath.FromSlash(p)))
		if err != nil {
			a.failf(CheckSource, "source %s: missing from the checkout", p)
			continue
		}
		if SourceHash(data) != listed[p] {
			a.failf(CheckSource, "source %s: SHA-256 does not match the checkout", p)
			continue
		}
		a.report.Sources++
	}
	files, err := SourceFiles(a.opts.Root)
	if err != nil {
		a.failf(CheckSource, "sources: cannot list the checkout: %v", err)
		return
	}
	for _, p := range files {
		if _, ok := listed[p]; !ok {
			a.failf(CheckSource, "source %s: not listed in the manifest", p)
		}
	}
}

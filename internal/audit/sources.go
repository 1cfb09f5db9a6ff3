package audit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"idemlab/internal/audit/digest"
)

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
		case !digest.IsSource(p):
			a.failf(CheckSource, "source %s: not a source path (go.mod, go.sum, or a non-test file under %s)", p, strings.Join(digest.SourceDirs, "/, ")+"/")
			continue
		}
		if digest.SourceHash(data) != listed[p] {
			a.failf(CheckSource, "source %s: SHA-256 does not match the checkout", p)
			continue
		}
		a.report.Sources++
	}
	a.check()
	files, err := digest.SourceFiles(a.opts.Root)
	var refused *digest.RefusedError
	if errors.As(err, &refused) {
		for _, p := range refused.Paths {
			if !reported[p] {
				a.failf(CheckSource, "source %s: not a regular file (a symlink or special file; refused, never followed)", p)
			}
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

package audit

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"idemlab/internal/audit/digest"
)

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// checkCommit checks that manifest.source_commit is a commit of the
// checkout's history whose sources are exactly manifest.sources, hash for
// hash; without git history at the root a note says so.
func (a *auditor) checkCommit() {
	a.check()
	commit, _ := str(a.manifest, "source_commit")
	if !commitHash.MatchString(commit) {
		a.failf(CheckManifest, "manifest.json: source_commit: %q: the evidence names no commit, so its sources cannot be tied to history", commit)
		return
	}
	root, err := filepath.Abs(a.opts.Root)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	top, gerr := git(a.opts.Root, "rev-parse", "--show-toplevel")
	if err != nil || gerr != nil || filepath.Clean(strings.TrimSpace(string(top))) != root {
		why := "no repository there, or no git"
		if gerr == nil && err == nil {
			why = "the repository's top is " + strings.TrimSpace(string(top))
		}
		a.note("source_commit not checked: the checkout has no git history at " + a.opts.Root + " (" + why + ")")
		return
	}
	if t, err := git(a.opts.Root, "cat-file", "-t", commit); err != nil || strings.TrimSpace(string(t)) != "commit" {
		a.failf(CheckManifest, "manifest.json: source_commit: %s is not a commit in the checkout's history", commit)
		return
	}
	if dirty, _ := a.manifest["source_dirty"].(bool); dirty {
		a.note("source_commit exists in the checkout's history; its tree was not compared with manifest.sources (the evidence came from uncommitted sources)")
		return
	}
	tree, err := git(a.opts.Root, "ls-tree", "-r", "-z", "--full-tree", commit)
	if err != nil {
		a.failf(CheckManifest, "manifest.json: source_commit: git ls-tree %s: %v", commit, err)
		return
	}
	listed := stringMap(a.manifest, "sources")
	blobs := map[string]string{} // path -> blob id
	for _, e := range bytes.Split(tree, []byte{0}) {
		meta, path, ok := strings.Cut(string(e), "\t")
		if !ok || !digest.IsSource(path) {
			continue
		}
		f := strings.Fields(meta) // mode type id
		if len(f) != 3 || f[1] != "blob" || f[0] == "120000" || f[0] == "160000" {
			a.failf(CheckManifest, "source_commit %s: %s is not a regular file in the commit", commit[:12], path)
			continue
		}
		blobs[path] = f[2]
	}
	for _, p := range sortedKeys(listed) {
		if _, ok := blobs[p]; !ok {
			a.failf(CheckManifest, "source_commit %s: source %s is listed in manifest.sources but not in the commit", commit[:12], p)
		}
	}
	var ids, paths []string
	for _, p := range sortedKeys(blobs) {
		if _, ok := listed[p]; !ok {
			a.failf(CheckManifest, "source_commit %s: source %s is in the commit but not listed in manifest.sources", commit[:12], p)
			continue
		}
		ids = append(ids, blobs[p])
		paths = append(paths, p)
	}
	sums, err := blobHashes(a.opts.Root, ids)
	if err != nil {
		a.failf(CheckManifest, "manifest.json: source_commit: git cat-file: %v", err)
		return
	}
	for i, p := range paths {
		a.check()
		if sums[i] != listed[p] {
			a.failf(CheckManifest, "source_commit %s: source %s: the commit's version does not hash to manifest.sources", commit[:12], p)
		}
	}
	a.claim("commit")
}

// memo keeps answers that never change for a folder (git objects, a
// rebuild) for the life of the process: the byte-flip sweep audits the
// same checkout thousands of times.
var memo sync.Map

type answer[T any] struct {
	v   T
	err error
}

// remember returns f's answer for key, calling f only the first time.
func remember[T any](key string, f func() (T, error)) (T, error) {
	if a, ok := memo.Load(key); ok {
		return a.(answer[T]).v, a.(answer[T]).err
	}
	v, err := f()
	memo.Store(key, answer[T]{v, err})
	return v, err
}

// git runs git in dir and returns its standard output (remembered).
func git(dir string, args ...string) ([]byte, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return remember(abs+"\x00git\x00"+strings.Join(args, "\x00"), func() ([]byte, error) {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	})
}

// blobHashes returns digest.SourceHash of each blob, read in dir's
// repository. A blob's id names its bytes in any repository, so the
// answer is remembered by the ids alone: folders that share a history
// (worktrees, the golden stories' copies of one checkout) read it once.
func blobHashes(dir string, ids []string) ([]string, error) {
	return remember("blobs\x00"+strings.Join(ids, " "), func() ([]string, error) { return readBlobs(dir, ids) })
}

func readBlobs(dir string, ids []string) ([]string, error) {
	cmd := exec.Command("git", "-C", dir, "cat-file", "--batch")
	cmd.Stdin = strings.NewReader(strings.Join(ids, "\n") + "\n")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// On every return git is stopped first: one that is still writing an
	// answer nobody reads would never exit, and Wait never return.
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	r := bufio.NewReader(stdout)
	out := make([]string, 0, len(ids))
	for range ids {
		head, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		f := strings.Fields(head) // id type size
		if len(f) != 3 || f[1] != "blob" {
			return nil, fmt.Errorf("unexpected answer %q", strings.TrimSpace(head))
		}
		size, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || size > CapSource {
			return nil, fmt.Errorf("blob %s: size %s over the cap of %d bytes", f[0], f[2], CapSource)
		}
		data := make([]byte, size+1) // the blob and its newline
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, err
		}
		out = append(out, digest.SourceHash(data[:size]))
	}
	return out, nil
}

package target

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"idemlab/internal/safefile"
)

// Bounds of a target folder and its setup.
const (
	MaxFolderFiles = 10000    // files digested, node_modules left out
	MaxFolderBytes = 64 << 20 // their total size
	SetupWithin    = 10 * time.Minute
	// SetupMarker holds the digest of the folder the setup last succeeded
	// on; SetupLock serialises setups of one folder across runners.
	SetupMarker = ".idemlab-setup"
	SetupLock   = ".idemlab-setup.lock"
)

// skipped are the names a folder digest leaves out, at any depth: what
// setup makes, the setup's own marker, and version control.
var skipped = []string{"node_modules", SetupMarker, SetupLock, ".git"}

// Digest returns the SHA-256 over every regular file of the target's folder
// by path and content, skipped names left out. Any other file is an error:
// the digest must name every byte the target runs from.
func (t *Target) Digest() (string, error) {
	type entry struct{ rel, sum string }
	var entries []entry
	var total int64
	err := filepath.WalkDir(t.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != t.Dir && slices.Contains(skipped, d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (a target folder holds regular files only)", p)
		}
		if len(entries) == MaxFolderFiles {
			return fmt.Errorf("more than %d files", MaxFolderFiles)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if total += info.Size(); total > MaxFolderBytes {
			return fmt.Errorf("more than %d bytes", MaxFolderBytes)
		}
		b, err := safefile.Read(p, MaxFolderBytes)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(t.Dir, p)
		sum := sha256.Sum256(b)
		entries = append(entries, entry{filepath.ToSlash(rel), hex.EncodeToString(sum[:])})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("target %s: digest folder: %w", t.Name, err)
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s\x00%s\n", e.rel, e.sum)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EnsureSetup runs the target's setup command in its folder, saying so on
// log, unless it succeeded on a folder with this digest. A lock file
// serialises setups of one folder.
func (t *Target) EnsureSetup(ctx context.Context, digest string, log io.Writer) error {
	if len(t.Setup) == 0 {
		return nil
	}
	marker := filepath.Join(t.Dir, SetupMarker)
	lock, err := os.OpenFile(filepath.Join(t.Dir, SetupLock), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("target %s: setup: %w", t.Name, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("target %s: setup: lock %s: %w", t.Name, lock.Name(), err)
	}
	if b, err := safefile.Read(marker, 128); err == nil && strings.TrimSpace(string(b)) == digest {
		return nil
	}
	fmt.Fprintf(log, "target %s: setup: %s (first run on this folder's contents) ...\n", t.Name, strings.Join(t.Setup, " "))
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, SetupWithin)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.Setup[0], t.Setup[1:]...)
	cmd.Dir = t.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("target %s: setup %s: %w: %s", t.Name, strings.Join(t.Setup, " "), err, tail(out, 800))
	}
	if err := os.WriteFile(marker, []byte(digest+"\n"), 0o644); err != nil {
		return fmt.Errorf("target %s: setup: %w", t.Name, err)
	}
	fmt.Fprintf(log, "target %s: setup done in %.1f s\n", t.Name, time.Since(began).Seconds())
	return nil
}

// tail is the last n bytes of out, on one line.
func tail(out []byte, n int) string {
	out = bytes.TrimSpace(out)
	if len(out) > n {
		out = append([]byte("..."), out[len(out)-n:]...)
	}
	return strings.ReplaceAll(string(out), "\n", " | ")
}

// Library is one package of the code under test, at its pinned version.
type Library struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Libraries reads the versions of versions.packages from the lock file
// (package-lock.json, lockfileVersion 2 or 3: packages["node_modules/NAME"]).
func (t *Target) Libraries() ([]Library, error) {
	if t.Versions.Lock == "" {
		return nil, nil
	}
	path := filepath.Join(t.Dir, t.Versions.Lock)
	b, err := safefile.Read(path, 16<<20)
	if err != nil {
		return nil, fmt.Errorf("target %s: versions: %w", t.Name, err)
	}
	var lock struct {
		LockfileVersion int `json:"lockfileVersion"`
		Packages        map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return nil, fmt.Errorf("target %s: versions: %s: %w", t.Name, path, err)
	}
	if lock.LockfileVersion < 2 {
		return nil, fmt.Errorf("target %s: versions: %s: lockfileVersion %d, want 2 or 3", t.Name, path, lock.LockfileVersion)
	}
	var out []Library
	for _, name := range t.Versions.Packages {
		p, ok := lock.Packages["node_modules/"+name]
		if !ok || p.Version == "" {
			return nil, fmt.Errorf("target %s: versions: %s pins no version of %s", t.Name, path, name)
		}
		out = append(out, Library{Name: name, Version: p.Version})
	}
	return out, nil
}

// RuntimeVersion runs versions.runtime in the folder and returns the first
// line it printed ("" when target.json names no runtime command).
func (t *Target) RuntimeVersion(ctx context.Context) (string, error) {
	if len(t.Versions.Runtime) == 0 {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.Versions.Runtime[0], t.Versions.Runtime[1:]...)
	cmd.Dir = t.Dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("target %s: runtime version %s: %w", t.Name, strings.Join(t.Versions.Runtime, " "), err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if line == "" {
		return "", errors.New("target " + t.Name + ": runtime version: no output")
	}
	return line, nil
}

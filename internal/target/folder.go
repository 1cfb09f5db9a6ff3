package target

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"idemlab/internal/audit/digest"
	"idemlab/internal/safefile"
)

// SetupWithin bounds a target's setup.
const SetupWithin = 10 * time.Minute

// SetupMarker is the marker earlier labs left in a target's folder: a
// setup removes it, and its lock (digest.SetupLock).
const SetupMarker = digest.SetupMarker

// Digest is the SHA-256 over every byte the target runs from: its folder's
// regular files by path and content, node_modules, .git and what its
// .gitignore names left out (digest.Folder, as the audit re-derives it).
func (t *Target) Digest() (string, error) {
	d, err := digest.Folder(filepath.Dir(t.Dir), filepath.Base(t.Dir))
	if err != nil {
		return "", fmt.Errorf("target %s: digest folder: %w", t.Name, err)
	}
	return d, nil
}

// EnsureSetup runs the target's setup command in its folder, saying so on
// log, unless it last succeeded on this folder with this digest. That
// record, and a lock serialising setups of the folder, live in the lab's
// cache (os.UserCacheDir()/idemlab/setup), named by a hash of the folder's
// path: nothing of the lab's is left in the folder.
func (t *Target) EnsureSetup(ctx context.Context, folderDigest string, log io.Writer) error {
	if len(t.Setup) == 0 {
		return nil
	}
	cache, err := os.UserCacheDir()
	if err == nil {
		cache = filepath.Join(cache, "idemlab", "setup")
		err = os.MkdirAll(cache, 0o755)
	}
	if err != nil {
		return fmt.Errorf("target %s: setup: %w", t.Name, err)
	}
	sum := sha256.Sum256([]byte(t.Dir))
	marker, done := filepath.Join(cache, hex.EncodeToString(sum[:16])), t.Dir+"\n"+folderDigest+"\n"
	lock, err := os.OpenFile(marker+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("target %s: setup: %w", t.Name, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("target %s: setup: lock %s: %w", t.Name, lock.Name(), err)
	}
	os.Remove(filepath.Join(t.Dir, SetupMarker))
	os.Remove(filepath.Join(t.Dir, digest.SetupLock))
	if b, err := safefile.Read(marker, 8192); err == nil && string(b) == done {
		return nil
	}
	os.Remove(marker) // a failed setup may leave the folder half made
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
	if err := os.WriteFile(marker, []byte(done), 0o644); err != nil {
		return fmt.Errorf("target %s: setup: %w", t.Name, err)
	}
	fmt.Fprintf(log, "target %s: setup done in %.1f s\n", t.Name, time.Since(began).Seconds())
	return nil
}

// tail is the last n bytes of out, on one line.
func tail(out []byte, n int) string {
	s := strings.TrimSpace(string(out))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return strings.ReplaceAll(s, "\n", " | ")
}

// Library is one package of the code under test, at its pinned version.
type Library = digest.Library

// Libraries reads the versions of versions.packages from the lock file
// (digest.Libraries, as the audit re-reads them).
func (t *Target) Libraries() ([]Library, error) {
	libs, err := digest.Libraries(filepath.Dir(t.Dir), filepath.Base(t.Dir), t.Versions.Lock, t.Versions.Packages)
	if err != nil {
		return nil, fmt.Errorf("target %s: versions: %w", t.Name, err)
	}
	return libs, nil
}

// RuntimeVersion runs versions.runtime in the folder and returns the first
// line it printed on stdout, or else on stderr (java -version writes
// there); "" when target.json names no runtime command.
func (t *Target) RuntimeVersion(ctx context.Context) (string, error) {
	if len(t.Versions.Runtime) == 0 {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.Versions.Runtime[0], t.Versions.Runtime[1:]...)
	cmd.Dir = t.Dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("target %s: runtime version %s: %w: %s", t.Name, strings.Join(t.Versions.Runtime, " "), err, tail(stderr.Bytes(), 400))
	}
	line, _, _ := strings.Cut(cmp.Or(strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String())), "\n")
	if line == "" {
		return "", fmt.Errorf("target %s: runtime version: no output", t.Name)
	}
	return line, nil
}

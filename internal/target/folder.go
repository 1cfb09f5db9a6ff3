package target

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"idemlab/internal/audit/digest"
	"idemlab/internal/safefile"
	"idemlab/internal/serverproc"
)

// SetupWithin bounds a target's setup.
const SetupWithin = 10 * time.Minute

// SetupTail is how much of what a setup prints (stdout and stderr, in
// order) is kept while it runs, its last bytes: a failed setup's error
// shows them and says how many came before.
const SetupTail = 4 << 10

// RuntimeWithin bounds versions.runtime; RuntimeHead is how much of each
// of its stdout and stderr is kept (their first bytes: the first line is
// the version).
const (
	RuntimeWithin = 10 * time.Second
	RuntimeHead   = 4 << 10
)

// lockPoll is how often a runner waiting for another's setup of the same
// folder tries the lock again.
const lockPoll = 200 * time.Millisecond

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
// log, unless it last succeeded on this folder with this digest and the
// folder's top level is as that setup left it (folderState). That record,
// and a lock serialising setups of the folder, live in the lab's cache
// (os.UserCacheDir()/idemlab/setup), named by a hash of the folder's path:
// nothing of the lab's is left in the folder.
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
	if err := t.lockSetup(ctx, lock, log); err != nil {
		return err
	}
	os.Remove(filepath.Join(t.Dir, SetupMarker))
	os.Remove(filepath.Join(t.Dir, digest.SetupLock))
	if b, err := safefile.Read(marker, 8192); err == nil {
		if state, err := folderState(t.Dir); err == nil && string(b) == done+state+"\n" {
			return nil
		}
	}
	os.Remove(marker) // a failed setup may leave the folder half made
	fmt.Fprintf(log, "target %s: setup: %s (first run on this folder's contents) ...\n", t.Name, strings.Join(t.Setup, " "))
	began := time.Now()
	out := &serverproc.Tail{Max: SetupTail}
	err = serverproc.Run(ctx, serverproc.Command{Argv: t.Setup, Dir: t.Dir, Env: t.SetupEnv(), Within: SetupWithin, Stdout: out, Stderr: out})
	if err != nil {
		return fmt.Errorf("target %s: setup %s: %w: %s", t.Name, strings.Join(t.Setup, " "), err, tail(out))
	}
	state, err := folderState(t.Dir)
	if err == nil {
		err = os.WriteFile(marker, []byte(done+state+"\n"), 0o644)
	}
	if err != nil {
		return fmt.Errorf("target %s: setup: %w", t.Name, err)
	}
	fmt.Fprintf(log, "target %s: setup done in %.1f s\n", t.Name, time.Since(began).Seconds())
	return nil
}

// folderState is a hash of the folder's top level as it stands: each
// entry's name, inode and modification time. The digest leaves out what a
// setup makes (node_modules, a binary the .gitignore names), so a digest
// alone cannot tell a set-up folder from a fresh clone of the same sources
// at the same path, or from one whose products were removed: both have
// other top-level entries, or other inodes and times, than the setup left.
func folderState(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return "", err
		}
		var ino uint64
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(h, "%q %d %d\n", e.Name(), ino, info.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lockSetup takes lock, the lock serialising setups of t's folder; where
// another runner holds it, it says so on log, once, and waits until the
// lock is free or ctx ends.
func (t *Target) lockSetup(ctx context.Context, lock *os.File, log io.Writer) error {
	for said := false; ; {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("target %s: setup: lock %s: %w", t.Name, lock.Name(), err)
		}
		if !said {
			fmt.Fprintf(log, "waiting for another runner's setup of %s (lock %s)\n", t.Name, lock.Name())
			said = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("target %s: setup: waiting for lock %s: %w", t.Name, lock.Name(), ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// tail is what out kept, on one line, saying how many bytes came before.
func tail(out *serverproc.Tail) string {
	s := oneLine(out.Bytes(), out.Max)
	if cut := out.Cut(); cut > 0 {
		s = fmt.Sprintf("(%d bytes before the last %d not kept) ...%s", cut, len(out.Bytes()), s)
	}
	return s
}

// oneLine is the last n bytes of b, on one line.
func oneLine(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
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
	stdout, stderr := &serverproc.Head{Max: RuntimeHead, Quiet: true}, &serverproc.Head{Max: RuntimeHead, Quiet: true}
	err := serverproc.Run(ctx, serverproc.Command{Argv: t.Versions.Runtime, Dir: t.Dir, Env: t.SetupEnv(), Within: RuntimeWithin, Stdout: stdout, Stderr: stderr})
	if err != nil {
		return "", fmt.Errorf("target %s: runtime version %s: %w: %s", t.Name, strings.Join(t.Versions.Runtime, " "), err, oneLine(stderr.Bytes(), 400))
	}
	line, _, _ := strings.Cut(cmp.Or(strings.TrimSpace(string(stdout.Bytes())), strings.TrimSpace(string(stderr.Bytes()))), "\n")
	if line == "" {
		return "", fmt.Errorf("target %s: runtime version: no output", t.Name)
	}
	return line, nil
}

package pgcluster

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// A pristine data folder is initdb's output before any server ran on it.
// initdb costs about a second of CPU a cluster and its output depends only
// on the programs and initdb's arguments, so the first cluster keeps a copy
// under the user's cache folder (os.UserCacheDir()/idemlab/pgdata/KEY,
// KEY hashing both programs' size and change time and the arguments) and a
// later one copies it instead of running initdb: the same files, in a
// fresh folder, owned by the server's user. A copy is checked against the
// digest kept beside it while it is made; one that differs (a damaged
// entry) is dropped and initdb runs.
const pristineDigest = "digest"

// maxPristine bounds the kept entries; past it the least recently made go.
const maxPristine = 4

// pristineKey names initdb's output for these programs and arguments; ""
// when a program cannot be read (then nothing is kept).
func pristineKey(bin string, initdbArgs []string) string {
	h := sha256.New()
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(bin, name))
		if err != nil {
			return ""
		}
		fmt.Fprintf(h, "%s %d %d\n", name, fi.Size(), fi.ModTime().UnixNano())
	}
	fmt.Fprintf(h, "%q\n", initdbArgs)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// pristineDir is where the entry of key is kept; "" when there is no
// cache folder.
func pristineDir(key string) string {
	cache, err := os.UserCacheDir()
	if err != nil || key == "" {
		return ""
	}
	return filepath.Join(cache, "idemlab", "pgdata", key)
}

// fromPristine copies the kept entry at dir to data, owned by cred, and
// reports whether it did; a missing entry copies nothing, a damaged one
// is removed.
func fromPristine(dir, data string, cred *syscall.Credential) bool {
	if dir == "" {
		return false
	}
	want, err := os.ReadFile(filepath.Join(dir, pristineDigest))
	if err != nil {
		os.RemoveAll(dir) // none, or one without its digest: kept again after initdb
		return false
	}
	got, err := copyData(filepath.Join(dir, "data"), data, cred)
	if err != nil || !bytes.Equal(got, bytes.TrimSpace(want)) {
		os.RemoveAll(data)
		if err == nil { // the entry's files are not what was kept
			os.RemoveAll(dir)
		}
		return false
	}
	return true
}

// keepPristine keeps a copy of data, initdb's output, as the entry at dir
// (made whole under another name, then renamed: a concurrent Start sees
// none or all of it) and drops the oldest entries past maxPristine.
// Failing to keep it only costs the next cluster an initdb.
func keepPristine(dir, data string) {
	if dir == "" {
		return
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return
	}
	tmp, err := os.MkdirTemp(parent, ".making-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp)
	sum, err := copyData(data, filepath.Join(tmp, "data"), nil)
	if err != nil || os.WriteFile(filepath.Join(tmp, pristineDigest), append(sum, '\n'), 0o600) != nil {
		return
	}
	if os.Rename(tmp, dir) != nil {
		return // another Start kept it first
	}
	trimPristine(parent)
}

// trimPristine removes the least recently made entries past maxPristine.
func trimPristine(parent string) {
	entries, _ := os.ReadDir(parent)
	type made struct {
		name string
		at   int64
	}
	var kept []made
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			kept = append(kept, made{e.Name(), fi.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(kept, func(a, b made) int { return cmp.Compare(b.at, a.at) })
	for _, m := range kept[min(len(kept), maxPristine):] {
		os.RemoveAll(filepath.Join(parent, m.name))
	}
}

// copyData copies folder from to a new folder to, modes kept, owned by
// cred when given, and returns the hex digest of every path, mode and
// content, in walk order.
func copyData(from, to string, cred *syscall.Credential) ([]byte, error) {
	h := sha256.New()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %o\n", rel, fi.Mode())
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			err = os.Mkdir(dst, fi.Mode().Perm())
		case d.Type().IsRegular():
			err = copyFile(p, dst, fi.Mode().Perm(), h)
		default:
			return fmt.Errorf("%s: not a regular file or folder", p)
		}
		if err == nil && cred != nil {
			err = os.Lchown(dst, int(cred.Uid), int(cred.Gid))
		}
		return err
	})
	return []byte(hex.EncodeToString(h.Sum(nil))), err
}

// copyFile copies file from to a new file to with perm, its bytes also
// written to h.
func copyFile(from, to string, perm fs.FileMode, h hash.Hash) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.MultiWriter(dst, h), src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

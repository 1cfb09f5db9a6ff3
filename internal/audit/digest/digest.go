// Package digest is the one home of what the lab records about the code it
// ran: the checkout's sources and their hashes (manifest.json), a target
// folder's digest and the library versions its lock file pins
// (targets.json). The lab writes the record with it; the audit recomputes
// it from the checkout with it and compares. It imports no lab package.
package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"idemlab/internal/audit/strict"
)

// The bounds of a target folder's digest and of its lock file.
const (
	MaxFolderFiles = 10000    // files digested, the skipped names left out
	MaxFolderBytes = 64 << 20 // their total size
	MaxLockBytes   = 16 << 20 // a package-lock.json (44 KB)
)

// SetupMarker and SetupLock are the files earlier labs left in a target's
// folder (the lab's cache holds them now).
const (
	SetupMarker = ".idemlab-setup"
	SetupLock   = SetupMarker + ".lock"
)

// skipped are the names a folder's digest leaves out at any depth: what a
// Node target's setup makes, the old marker and lock, and version control.
// They are exact names: a file .idemlab-setup-old is digested.
var skipped = []string{"node_modules", SetupMarker, SetupLock, ".git"}

// IgnoreFile, at the top of a target's folder, names more files its digest
// leaves out, in the simple dialect docs/targets.md gives (ignored).
const (
	IgnoreFile     = ".gitignore"
	MaxIgnoreBytes = 4 << 10
)

// ignored reads base's IgnoreFile: whether the slash path rel is ignored.
// A pattern (path.Match's) without a slash matches a name at any depth,
// one with a slash rel (a leading one dropped); a trailing slash, folders
// only. Blank lines and # comments are skipped; ! and ** are refused.
func ignored(base string) (func(rel string, dir bool) bool, error) {
	var buf bytes.Buffer
	if _, err := copyFile(&buf, filepath.Join(base, IgnoreFile), MaxIgnoreBytes); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", IgnoreFile, err)
	}
	var pats []string
	for i, p := range strings.Split(buf.String(), "\n") {
		p = strings.TrimSpace(p)
		switch _, bad := path.Match(p, ""); {
		case p == "" || p[0] == '#':
		case bad != nil || p[0] == '!' || strings.Contains(p, "**"):
			return nil, fmt.Errorf("%s:%d: %q: want a name or path, *, ? and [..] only (docs/targets.md)", IgnoreFile, i+1, p)
		default:
			pats = append(pats, p)
		}
	}
	return func(rel string, dir bool) bool {
		return slices.ContainsFunc(pats, func(p string) bool {
			p, folderOnly := strings.CutSuffix(p, "/")
			name := path.Base(rel)
			if strings.Contains(p, "/") {
				p, name = strings.TrimPrefix(p, "/"), rel
			}
			ok, _ := path.Match(p, name)
			return ok && (dir || !folderOnly)
		})
	}, nil
}

// SourceDirs are the folders whose regular files are sources, besides
// go.mod and go.sum (IsSource says which).
var SourceDirs = []string{"cmd", "internal", "cases", "schema", "targets"}

// The refusals of a file that is not one the digests may read.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrSymlink    = errors.New("a symbolic link (refused: the audit reads only regular files inside its folders)")
)

// IsSource reports whether a slash path relative to the checkout root is a
// source: go.mod, go.sum, or a file below a SourceDirs folder, except
// *_test.go, anything in a testdata or node_modules folder (a target's
// setup makes it), and a target's setup marker (.idemlab-setup*).
func IsSource(p string) bool {
	if p == "go.mod" || p == "go.sum" {
		return true
	}
	parts := strings.Split(p, "/")
	base := parts[len(parts)-1]
	if len(parts) < 2 || !slices.Contains(SourceDirs, parts[0]) ||
		strings.HasSuffix(base, "_test.go") || strings.HasPrefix(base, SetupMarker) {
		return false
	}
	return !slices.ContainsFunc(parts[1:len(parts)-1], func(s string) bool { return s == "testdata" || s == "node_modules" })
}

// A RefusedError lists the sources that are not regular files.
type RefusedError struct{ Paths []string }

// Error names the refused paths.
func (e *RefusedError) Error() string {
	return "not regular files (refused): " + strings.Join(e.Paths, ", ")
}

// SourceFiles lists the checkout's sources as sorted slash paths, less
// what a target folder's IgnoreFile names (targetBuilt); those that are
// not regular files are never followed but named in a *RefusedError
// returned with the list. A refused IgnoreFile is an error.
func SourceFiles(root string) ([]string, error) {
	var out, refused []string
	ignores := map[string]func(string, bool) bool{} // per target folder
	for _, f := range []string{"go.mod", "go.sum"} {
		fi, err := os.Lstat(filepath.Join(root, f))
		switch {
		case err != nil:
		case fi.Mode().IsRegular():
			out = append(out, f)
		default:
			refused = append(refused, f)
		}
	}
	for _, dir := range SourceDirs {
		base := filepath.Join(root, dir)
		if fi, err := os.Lstat(base); err != nil || !fi.IsDir() {
			if !os.IsNotExist(err) {
				refused = append(refused, dir)
			}
			continue
		}
		err := filepath.WalkDir(base, func(name string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, name)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			built, err := targetBuilt(root, rel, d.IsDir(), ignores)
			if err != nil {
				return err
			}
			switch {
			case built && d.IsDir():
				return filepath.SkipDir
			case built:
			case d.IsDir() && name != base && (d.Name() == "testdata" || d.Name() == "node_modules"):
				return filepath.SkipDir
			case d.IsDir() || !IsSource(rel):
			case !d.Type().IsRegular():
				refused = append(refused, rel)
			default:
				out = append(out, rel)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(refused) > 0 {
		return out, &RefusedError{refused}
	}
	return out, nil // WalkDir visits in lexical order; dirs are in fixed order
}

// targetBuilt reports whether the slash path rel, inside a target's
// folder (targets/NAME/...), is one its IgnoreFile names: what its setup
// builds there (a Go binary), no source, as it is no part of the folder's
// digest (Folder). ignores caches each folder's reading.
func targetBuilt(root, rel string, dir bool, ignores map[string]func(string, bool) bool) (bool, error) {
	parts := strings.SplitN(rel, "/", 3)
	if len(parts) < 3 || parts[0] != "targets" {
		return false, nil
	}
	folder := parts[0] + "/" + parts[1]
	ig, ok := ignores[folder]
	if !ok {
		var err error
		if ig, err = ignored(filepath.Join(root, filepath.FromSlash(folder))); err != nil {
			return false, fmt.Errorf("%s: %w", folder, err)
		}
		ignores[folder] = ig
	}
	return ig(parts[2], dir), nil
}

// SourceHash is the SHA-256 (hex) of data with every CRLF folded to LF, so
// that a Windows checkout hashes as the committed bytes do.
func SourceHash(data []byte) string {
	sum := sha256.Sum256(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")))
	return hex.EncodeToString(sum[:])
}

// Sources hashes every source file under root (SourceFiles, SourceHash):
// slash path to hash, as manifest.json records them. A source that is not
// a regular file is left out (the audit names it).
func Sources(root string) (map[string]string, error) {
	files, err := SourceFiles(root)
	if _, refused := errors.AsType[*RefusedError](err); err != nil && !refused {
		return nil, fmt.Errorf("hash sources: %w", err)
	}
	out := make(map[string]string, len(files))
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, fmt.Errorf("hash sources: %w", err)
		}
		out[f] = SourceHash(b)
	}
	return out, nil
}

// Folder is the SHA-256 over the folder root/dir (dir a slash path): a
// line "PATH\x00SHA256\n" per regular file, in byte order of its slash
// path, the skipped names and what its IgnoreFile names left out. A
// symlink or other non-regular file is refused, and so is a folder over
// MaxFolderFiles files or MaxFolderBytes bytes.
func Folder(root, dir string) (string, error) {
	base, err := folder(root, dir)
	if err != nil {
		return "", err
	}
	ignore, err := ignored(base)
	if err != nil {
		return "", err
	}
	var lines []string // "PATH\x00SHA256\n": sorted, in PATH's byte order
	var total int64
	var walk func(abs, rel string) error
	walk = func(abs, rel string) error {
		list, err := os.ReadDir(abs)
		if err != nil {
			return err
		}
		for _, e := range list {
			p, r := filepath.Join(abs, e.Name()), rel+e.Name()
			if slices.Contains(skipped, e.Name()) || ignore(r, e.IsDir()) {
				continue
			}
			switch {
			case e.IsDir(): // not a symlink to one
				if err := walk(p, r+"/"); err != nil {
					return err
				}
				continue
			case len(lines) == MaxFolderFiles && e.Type().IsRegular(): // copyFile refuses the others
				return fmt.Errorf("more than %d files", MaxFolderFiles)
			}
			h := sha256.New()
			n, err := copyFile(h, p, MaxFolderBytes-total)
			if _, big := errors.AsType[*tooLargeError](err); big {
				return fmt.Errorf("more than %d bytes", MaxFolderBytes)
			} else if err != nil {
				return fmt.Errorf("%s: %w", r, err)
			}
			total += n
			lines = append(lines, r+"\x00"+hex.EncodeToString(h.Sum(nil))+"\n")
		}
		return nil
	}
	if err := walk(base, ""); err != nil {
		return "", err
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "")))
	return hex.EncodeToString(sum[:]), nil
}

// Library is one package of the code under test, at its pinned version.
type Library struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Libraries reads the versions of packages from the lock file root/dir/lock,
// as targets.json's libraries records them: empty, not nil, without a lock.
// A go.mod or go.sum pins modules (goPins); any other lock is a
// package-lock.json, lockfileVersion 2 or 3: packages["node_modules/NAME"].
func Libraries(root, dir, lock string, packages []string) ([]Library, error) {
	out := []Library{}
	if lock == "" {
		return out, nil
	}
	rel := dir + "/" + lock
	var buf bytes.Buffer
	base, err := folder(root, dir)
	if err == nil {
		_, err = copyFile(&buf, filepath.Join(base, lock), MaxLockBytes)
	}
	var pins map[string]string
	if err == nil && (lock == "go.mod" || lock == "go.sum") {
		pins = goPins(buf.String(), lock == "go.sum")
	} else if err == nil {
		pins, err = npmPins(buf.Bytes())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", rel, err)
	}
	for _, name := range packages {
		if pins[name] == "" {
			return nil, fmt.Errorf("%s pins no version of %s", rel, name)
		}
		out = append(out, Library{Name: name, Version: pins[name]})
	}
	return out, nil
}

// npmPins reads a package-lock.json's versions by package name.
func npmPins(b []byte) (map[string]string, error) {
	// A package-lock.json holds ~1,500 values and ~300 objects: a few a package.
	v, err := strict.Decode(b, strict.Caps{Values: 500_000, Objects: 100_000})
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	doc, _ := v.(map[string]any)
	n, _ := doc["lockfileVersion"].(json.Number)
	if i, _ := n.Int64(); i < 2 {
		version, _ := json.Marshal(doc["lockfileVersion"])
		return nil, fmt.Errorf("lockfileVersion %s, want 2 or 3", version)
	}
	pins := map[string]string{}
	pkgs, _ := doc["packages"].(map[string]any)
	for k, p := range pkgs {
		p, _ := p.(map[string]any)
		if name, ok := strings.CutPrefix(k, "node_modules/"); ok {
			pins[name], _ = p["version"].(string)
		}
	}
	return pins, nil
}

// goPins reads the module versions of a go.mod's require lines, or of a
// go.sum's module lines (not its /go.mod ones); "" for a module a go.mod
// replaces or a go.sum lists at two versions (its go.mod says which one).
func goPins(text string, sum bool) map[string]string {
	pins, block := map[string]string{}, ""
	var replaced []string
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); sum && len(f) == 3 && !strings.HasSuffix(f[1], "/go.mod") {
			if v, seen := pins[f[0]]; seen && v != f[1] {
				f[1] = ""
			}
			pins[f[0]] = f[1]
		}
		code, _, _ := strings.Cut(line, "//")
		f := append(strings.Fields(block), strings.Fields(code)...) // a block's lines as one-line directives
		switch {
		case sum:
		case block == "" && len(f) == 2 && f[1] == "(":
			block = f[0]
		case block != "" && len(f) == 2 && f[1] == ")":
			block = ""
		case len(f) == 3 && f[0] == "require":
			pins[f[1]] = f[2]
		case len(f) > 1 && f[0] == "replace":
			replaced = append(replaced, f[1])
		}
	}
	for _, m := range replaced {
		pins[m] = ""
	}
	return pins
}

// A tooLargeError is a file over its cap.
type tooLargeError struct{ size, limit int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%d bytes, over the cap of %d bytes", e.size, e.limit)
}

// folder returns root/dir (dir a slash path), refusing a part of dir that
// is a symlink or not a folder.
func folder(root, dir string) (string, error) {
	base := root
	for _, part := range strings.Split(dir, "/") {
		base = filepath.Join(base, part)
		fi, err := os.Lstat(base)
		switch {
		case err != nil:
			return "", UnwrapPath(err)
		case fi.Mode()&os.ModeSymlink != 0:
			return "", fmt.Errorf("%s: %w", dir, ErrSymlink)
		case !fi.IsDir():
			return "", fmt.Errorf("%s: not a folder", dir)
		}
	}
	return base, nil
}

// copyFile copies the regular file at path to w, refusing a symlink, a
// FIFO or a device (never opened) and a file over limit bytes (reading at
// most limit+1, should it grow meanwhile). Errors do not name the path;
// the caller checks its folders (folder).
func copyFile(w io.Writer, path string, limit int64) (int64, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return 0, UnwrapPath(err)
	case fi.Mode()&os.ModeSymlink != 0:
		return 0, ErrSymlink
	case !fi.Mode().IsRegular():
		return 0, ErrNotRegular
	case fi.Size() > limit:
		return 0, &tooLargeError{fi.Size(), limit}
	}
	// No symlink followed, no wait on a FIFO, should it be one by now.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, UnwrapPath(err)
	}
	defer f.Close()
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) {
		return 0, errors.New("changed while being read")
	}
	n, err := io.Copy(w, io.LimitReader(f, limit+1))
	if err == nil && n > limit {
		err = &tooLargeError{n, limit}
	}
	return n, UnwrapPath(err)
}

// UnwrapPath drops the path of an *os.PathError, for messages that name
// the file themselves (the audit's too).
func UnwrapPath(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err
	}
	return err
}

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmdtest"
)

var update = flag.Bool("update", false, "update the .ct files with the commands' output")

// fixtureDir is the committed, frozen fixture every .ct file starts from: a
// minimal checkout of data and the evidence folders the runner wrote, their
// manifests rewritten to describe it (testdata/fixture/README.md; regenerate
// with go run ./cmd/auditfixture).
const fixtureDir = "testdata/fixture"

// snapshot is a copy of the fixture whose root's sources are one git
// commit, the one the manifests name; setupErr says why it could not be
// made. snapshotFiles are its files but .git, read once: each .ct file's
// folder gets hard links to them and a .git file pointing to the
// snapshot's repository (the audit only reads git's objects).
var (
	snapshot, setupErr string
	snapshotFiles      []snapshotFile
)

type snapshotFile struct {
	name string // slash path inside the snapshot
	data []byte
}

// TestMain makes the snapshot once; each .ct file starts from links to it.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("GOGC") == "" {
		// The audits allocate much and keep little: fewer collections
		// cut the package's CPU time (17 s to 13-16 s measured on the
		// 2-core machine) for twice the peak memory (100 MB to 200 MB).
		debug.SetGCPercent(400)
	}
	tmp, err := os.MkdirTemp("", "audit-cmdtest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	snapshot = filepath.Join(tmp, "checkout")
	if !filepath.IsAbs(snapshot) {
		snapshot, err = filepath.Abs(snapshot) // the flip sweep runs beside cmdtest's changes of folder
	}
	if err != nil {
		setupErr = err.Error()
	} else if snapshotFiles, err = prepare(snapshot); err != nil {
		setupErr = "the golden fixture: " + err.Error()
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// prepare copies the fixture into dir and commits its root's sources, as
// cmd/auditfixture did when it wrote the manifests (the commit must be the
// manifests' source_commit), and returns the fixture's files.
func prepare(dir string) ([]snapshotFile, error) {
	var files []snapshotFile
	err := filepath.WalkDir(fixtureDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(fixtureDir, p)
		files = append(files, snapshotFile{filepath.ToSlash(rel), data})
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := writeSnapshot(dir, files); err != nil {
		return nil, err
	}
	got, err := commitRoot(dir)
	if err != nil {
		return nil, err
	}
	m, err := readJSON(filepath.Join(dir, "evidence", "manifest.json"))
	if err != nil {
		return nil, err
	}
	if want, _ := m["source_commit"].(string); got != want {
		return nil, fmt.Errorf("the root's commit is %s, the manifest's source_commit %s: "+
			"the root's files changed after go run ./cmd/auditfixture wrote them (run it again)", got, want)
	}
	return files, nil
}

// writeSnapshot writes files into dir.
func writeSnapshot(dir string, files []snapshotFile) error {
	return eachFile(dir, files, func(name string, f snapshotFile) error {
		return os.WriteFile(name, f.data, 0o644)
	})
}

// linkSnapshot fills dir with hard links to the snapshot's files (a copy
// where the file system refuses a link) and a .git file pointing to the
// snapshot's repository: a few syscalls a file instead of a copy, for
// each of ~70 .ct files. The commands replace a file rather than write it
// (writeFile), and TestAuditCommand checks afterwards that the snapshot is
// unchanged.
func linkSnapshot(dir string) error {
	err := eachFile(dir, snapshotFiles, func(name string, f snapshotFile) error {
		if os.Link(filepath.Join(snapshot, filepath.FromSlash(f.name)), name) == nil {
			return nil
		}
		return os.WriteFile(name, f.data, 0o644)
	})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ".git"), []byte("gitdir: "+filepath.Join(snapshot, ".git")+"\n"), 0o644)
}

// checkSnapshot reports a snapshot file that no longer holds its bytes.
func checkSnapshot() error {
	for _, f := range snapshotFiles {
		data, err := os.ReadFile(filepath.Join(snapshot, filepath.FromSlash(f.name)))
		if err != nil {
			return err
		}
		if !bytes.Equal(data, f.data) {
			return fmt.Errorf("snapshot file %s was written in place by a .ct file's command (write with writeFile)", f.name)
		}
	}
	return nil
}

// eachFile makes the folders of files under dir and calls do with each
// file's path there.
func eachFile(dir string, files []snapshotFile, do func(name string, f snapshotFile) error) error {
	made := map[string]bool{}
	for _, f := range files {
		name := filepath.Join(dir, filepath.FromSlash(f.name))
		if d := filepath.Dir(name); !made[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			made[d] = true
		}
		if err := do(name, f); err != nil {
			return err
		}
	}
	return nil
}

// commitRoot makes dir a git repository of one commit holding the root's
// sources, with the fixed identity and date of cmd/auditfixture's Commit
// (and no system or global git configuration), and returns its hash.
func commitRoot(dir string) (string, error) {
	const who, at = "audit fixture", "2026-01-01T00:00:00Z"
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME="+who, "GIT_COMMITTER_NAME="+who, "GIT_AUTHOR_DATE="+at, "GIT_COMMITTER_DATE="+at,
		"GIT_AUTHOR_EMAIL=fixture@idemlab.invalid", "GIT_COMMITTER_EMAIL=fixture@idemlab.invalid")
	var head []byte
	for _, args := range [][]string{{"init", "-q"}, {"add", "--", "go.mod", "go.sum", "cases", "schema", "targets", "internal", "cmd"},
		{"commit", "-q", "--no-gpg-sign", "--no-verify", "-m", "fixture"}, {"rev-parse", "HEAD"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		head = out
	}
	return strings.TrimSpace(string(head)), nil
}

// writeFile replaces name by a new file holding data (making its folder):
// never a write in place, because a .ct file's folder starts as hard links
// to the snapshot's files (linkSnapshot).
func writeFile(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.WriteFile(name, data, 0o644)
}

// appendFile replaces name by a new file holding its bytes and then data.
func appendFile(name string, data []byte) error {
	old, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	return writeFile(name, append(old, data...))
}

func readJSON(name string) (map[string]any, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return v, nil
}

func editJSON(name string, edit func(map[string]any)) error {
	v, err := readJSON(name)
	if err != nil {
		return err
	}
	edit(v)
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(name, append(data, '\n')); err != nil {
		return err
	}
	return followAfter(name) // forge_test.go
}

// editResults rewrites DIR/results.json through edit and records its new
// SHA-256 in DIR/manifest.json, as a forger covering their tracks would.
func editResults(dir string, edit func(runs []any) ([]any, error)) error {
	return editArray(dir, "results.json", "runs", edit)
}

// editArray rewrites the array field of DIR/FILE through edit and records
// the file's new SHA-256 in DIR/manifest.json.
func editArray(dir, file, field string, edit func(items []any) ([]any, error)) error {
	var editErr error
	err := editJSON(filepath.Join(dir, file), func(doc map[string]any) {
		items, _ := doc[field].([]any)
		doc[field], editErr = edit(items)
	})
	if err != nil {
		return err
	}
	if editErr != nil {
		return editErr
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	return editJSON(filepath.Join(dir, "manifest.json"), func(m map[string]any) {
		m["files"].(map[string]any)[file] = hex.EncodeToString(sum[:])
	})
}

func findRun(runs []any, cname, store string) (int, error) {
	for i, r := range runs {
		if m, ok := r.(map[string]any); ok && m["case"] == cname && m["store"] == store {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no run of case %s on store %s", cname, store)
}

// rehash records the SHA-256 of DIR/FILE in DIR/manifest.json, as a
// forger covering their tracks would; the manifest itself is not hashed.
func rehash(dir, file string) error {
	if file == "manifest.json" || file == statementFile { // unlisted; the statement follows the manifest (forge_test.go)
		return followAfter(filepath.Join(dir, file))
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	return editJSON(filepath.Join(dir, "manifest.json"), func(m map[string]any) {
		m["files"].(map[string]any)[file] = hex.EncodeToString(sum[:])
	})
}

// setPath sets (or deletes) the value at path inside v and returns v
// (a new slice where an array element was deleted).
func setPath(v any, path []string, val any, del bool) (any, error) {
	p := path[0]
	switch c := v.(type) {
	case map[string]any:
		if len(path) == 1 {
			if del {
				delete(c, p)
			} else {
				c[p] = val
			}
			return c, nil
		}
		sub, err := setPath(c[p], path[1:], val, del)
		c[p] = sub
		return c, err
	case []any:
		n, err := strconv.Atoi(p)
		if cname, store, ok := strings.Cut(p, "@"); ok {
			n, err = findRun(c, cname, store)
		}
		if err != nil || n < 0 || n >= len(c) {
			return c, fmt.Errorf("no element %s", p)
		}
		if len(path) == 1 {
			if del {
				return append(c[:n:n], c[n+1:]...), nil
			}
			c[n] = val
			return c, nil
		}
		sub, err := setPath(c[n], path[1:], val, del)
		c[n] = sub
		return c, err
	}
	return v, fmt.Errorf("%s: not inside an object or array", p)
}

// command wraps a tampering function as a cmdtest command.
func command(nargs int, usage string, f func(args []string) error) cmdtest.CommandFunc {
	return func(args []string, _ string) ([]byte, error) {
		if nargs >= 0 && len(args) != nargs || nargs < 0 && len(args) < -nargs {
			return nil, fmt.Errorf("usage: %s", usage)
		}
		return nil, f(args)
	}
}

// scrubs replace the counts that grow when a case file or a source file
// is added to the checkout (sources, runs, cases, calls, checks), so that
// adding one never means editing a golden file, and the local Go version.
var scrubs = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b\d+ sources verified\b`), "NN sources verified"},
	{regexp.MustCompile(`\b\d+ runs? \(\d+ cases? ×`), "NN runs (NN cases ×"},
	{regexp.MustCompile(`\b\d+ calls?, \d+ checks?;`), "NN calls, NN checks;"},
	{regexp.MustCompile(`"(sources|runs|cases|calls|checks)": \d+`), `"$1": NN`},
	{regexp.MustCompile(`the local Go is go[0-9a-z.]+`), "the local Go is GOVERSION"},
	{regexp.MustCompile("Source commit `[0-9a-f]{40}`"), "Source commit `COMMIT`"},
	{regexp.MustCompile(`\b\d+ match their`), "NN match their"},
	{regexp.MustCompile(`\(go1[0-9a-z.]+, `), "(GOVERSION, "},
	// What differs between chaos runs of one seed, so that regenerating
	// the fixture leaves the chaos goldens as they are: intent numbers,
	// attempts, replicas and values, how many crash faults fired, the
	// intent a finding names (rule/intent).
	{regexp.MustCompile(`intent \d+ \(key chaos-\d+\)`), "intent N (key chaos-N)"},
	{regexp.MustCompile(`attempt \d+ on replica \d+ got 200 "\d+"`), `attempt A on replica R got 200 "V"`},
	{regexp.MustCompile(`counts\.crash_exits: expected \d+ \((re-derived from chaos-\w+\.jsonl)\), observed \d+`), `counts.crash_exits: expected N (${1}), observed N`},
	{regexp.MustCompile(`(verdict\.findings: expected \w+)/\d+`), `${1}/N`},
}

// scrubCounts applies scrubs to a command's output.
func scrubCounts(f cmdtest.CommandFunc) cmdtest.CommandFunc {
	return func(args []string, in string) ([]byte, error) {
		out, err := f(args, in)
		for _, s := range scrubs {
			out = s.re.ReplaceAll(out, []byte(s.with))
		}
		return out, err
	}
}

// Ensure every story of testdata/*.ct gives its recorded output: each runs
// in a fresh copy of the snapshot, forging what its first comment says.
func TestAuditCommand(t *testing.T) {
	if setupErr != "" {
		t.Fatal(setupErr)
	}
	t.Parallel() // beside the flip sweep, which uses absolute paths only
	ts, err := cmdtest.Read("testdata")
	if err != nil {
		t.Fatal(err)
	}
	ts.Setup = linkSnapshot
	// audit ARGS: the command's run, its streams a buffer (no process-wide
	// redirection), in the test's current folder (the .ct file's own).
	ts.Commands["audit"] = scrubCounts(func(args []string, _ string) ([]byte, error) {
		var out bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &out); code != 0 {
			return out.Bytes(), &cmdtest.ExitCodeErr{Msg: "audit failed", Code: code}
		}
		return out.Bytes(), nil
	})
	// pin DIR: record in DIR/manifest.json the SHA-256 and Go version of
	// the root's stand-in server built by the local Go with the pinned
	// recipe (forge_test.go), as a runner on this machine would have, so that
	// -rebuild can reproduce it whatever Go runs the tests.
	ts.Commands["pin"] = command(1, "pin DIR", func(args []string) error {
		return pin(".", args[0])
	})

	// flipbyte FILE: flip the lowest bit of the file's last digit (a digit
	// stays a digit, so JSON stays JSON and only the hash can tell).
	ts.Commands["flipbyte"] = command(1, "flipbyte FILE", func(args []string) error {
		data, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		i := bytes.LastIndexAny(data, "0123456789")
		if i < 0 {
			return fmt.Errorf("%s: no digit to flip", args[0])
		}
		data[i] ^= 1
		return writeFile(args[0], data)
	})
	// forge-counter DIR CASE STORE VALUE: set a run's counter, rehash.
	ts.Commands["forge-counter"] = command(4, "forge-counter DIR CASE STORE VALUE", func(args []string) error {
		n, err := strconv.Atoi(args[3])
		if err != nil {
			return err
		}
		return editResults(args[0], func(runs []any) ([]any, error) {
			i, err := findRun(runs, args[1], args[2])
			if err != nil {
				return nil, err
			}
			runs[i].(map[string]any)["counter"] = n
			return runs, nil
		})
	})
	// droprun DIR CASE STORE: remove a run, rehash.
	ts.Commands["droprun"] = command(3, "droprun DIR CASE STORE", func(args []string) error {
		return editResults(args[0], func(runs []any) ([]any, error) {
			i, err := findRun(runs, args[1], args[2])
			if err != nil {
				return nil, err
			}
			return append(runs[:i:i], runs[i+1:]...), nil
		})
	})
	// schema-break DIR: make the first run's counter a string, rehash.
	ts.Commands["schema-break"] = command(1, "schema-break DIR", func(args []string) error {
		return editResults(args[0], func(runs []any) ([]any, error) {
			if len(runs) == 0 {
				return nil, fmt.Errorf("no run to break")
			}
			r := runs[0].(map[string]any)
			r["counter"] = fmt.Sprint(r["counter"])
			return runs, nil
		})
	})
	// forge DIR FILE ARRAY KEY VALUE FIELD N: in FILE's ARRAY, set FIELD of
	// the first item whose KEY is VALUE to the number N, rehash. For the
	// experiments' files, e.g. forge evidence retries.json rows client
	// never-retry duplicated 3.
	ts.Commands["forge"] = command(7, "forge DIR FILE ARRAY KEY VALUE FIELD N", func(args []string) error {
		n, err := strconv.Atoi(args[6])
		if err != nil {
			return err
		}
		return editArray(args[0], args[1], args[2], func(items []any) ([]any, error) {
			for _, it := range items {
				if m, ok := it.(map[string]any); ok && fmt.Sprint(m[args[3]]) == args[4] {
					m[args[5]] = n
					return items, nil
				}
			}
			return nil, fmt.Errorf("%s: no %s item with %s %s", args[1], args[2], args[3], args[4])
		})
	})
	// mark-dirty DIR: say in the manifest the tree was dirty.
	ts.Commands["mark-dirty"] = command(1, "mark-dirty DIR", func(args []string) error {
		return editJSON(filepath.Join(args[0], "manifest.json"), func(m map[string]any) { m["source_dirty"] = true })
	})
	// clonecase FROM TO: copy a case file under a new name (TO's base name
	// without NN- and .json).
	ts.Commands["clonecase"] = command(2, "clonecase FROM TO", func(args []string) error {
		doc, err := readJSON(args[0])
		if err != nil {
			return err
		}
		base := strings.TrimSuffix(filepath.Base(args[1]), ".json")
		doc["name"] = base[strings.Index(base, "-")+1:]
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		return writeFile(args[1], append(data, '\n'))
	})
	// copydir FROM TO: copy a folder.
	ts.Commands["copydir"] = command(2, "copydir FROM TO", func(args []string) error {
		return os.CopyFS(args[1], os.DirFS(args[0]))
	})
	ts.Commands["touch"] = command(1, "touch FILE", func(args []string) error {
		return writeFile(args[0], nil)
	})
	// append FILE TEXT...: append the words and a newline.
	ts.Commands["append"] = command(-2, "append FILE TEXT...", func(args []string) error {
		return appendFile(args[0], []byte(strings.Join(args[1:], " ")+"\n"))
	})
	ts.Commands["rm"] = command(1, "rm FILE", func(args []string) error {
		return os.Remove(args[0])
	})
	// setjson DIR FILE PATH VALUE: set the member or element at PATH
	// (dot-separated; numbers index arrays, CASE@STORE picks a run) of DIR/FILE to the JSON VALUE
	// (%20 for a space), or delete it (an element too) if VALUE is -; then
	// record FILE's
	// new SHA-256 in DIR/manifest.json (unless FILE is the manifest).
	ts.Commands["setjson"] = command(4, "setjson DIR FILE PATH VALUE", func(args []string) error {
		var v any
		if args[3] != "-" {
			raw, err := url.PathUnescape(args[3])
			if err != nil {
				return err
			}
			dec := json.NewDecoder(strings.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				return fmt.Errorf("VALUE %s: %v", args[3], err)
			}
		}
		name := filepath.Join(args[0], args[1])
		doc, err := readJSON(name)
		if err != nil {
			return err
		}
		if _, err := setPath(doc, strings.Split(args[2], "."), v, args[3] == "-"); err != nil {
			return fmt.Errorf("%s: %s: %v", args[1], args[2], err)
		}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFile(name, append(data, '\n')); err != nil {
			return err
		}
		return rehash(args[0], args[1])
	})
	// replace DIR FILE N OLD NEW: replace the first N occurrences (all if
	// N is 0) of OLD by NEW in DIR/FILE (%20 for a space, %0A for a
	// newline), then rehash FILE.
	ts.Commands["replace"] = command(5, "replace DIR FILE N OLD NEW", func(args []string) error {
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		old, err1 := url.PathUnescape(args[3])
		new, err2 := url.PathUnescape(args[4])
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		name := filepath.Join(args[0], args[1])
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		if !bytes.Contains(data, []byte(old)) {
			return fmt.Errorf("%s: no %q", args[1], old)
		}
		if n == 0 {
			n = -1
		}
		data = bytes.Replace(data, []byte(old), []byte(new), n)
		if err := writeFile(name, data); err != nil {
			return err
		}
		return rehash(args[0], args[1])
	})
	// deljson FILE PATH: delete the member at PATH (as setjson's) of FILE,
	// hashing nothing: a change to the checkout, not to the evidence.
	ts.Commands["deljson"] = command(2, "deljson FILE PATH", func(args []string) error {
		doc, err := readJSON(args[0])
		if err != nil {
			return err
		}
		if _, err := setPath(doc, strings.Split(args[1], "."), nil, true); err != nil {
			return fmt.Errorf("%s: %s: %v", args[0], args[1], err)
		}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		return writeFile(args[0], append(data, '\n'))
	})
	// overwrite DIR FILE TEXT...: make DIR/FILE hold the words and a
	// newline, then rehash FILE.
	ts.Commands["overwrite"] = command(-3, "overwrite DIR FILE TEXT...", func(args []string) error {
		if err := writeFile(filepath.Join(args[0], args[1]), []byte(strings.Join(args[2:], " ")+"\n")); err != nil {
			return err
		}
		return rehash(args[0], args[1])
	})
	// grow DIR FILE N: append spaces (still the same JSON) until the file
	// is N bytes, rehash.
	ts.Commands["grow"] = command(3, "grow DIR FILE N", func(args []string) error {
		n, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil {
			return err
		}
		name := filepath.Join(args[0], args[1])
		fi, err := os.Stat(name)
		if err != nil {
			return err
		}
		if err := appendFile(name, bytes.Repeat([]byte(" "), int(max(n-fi.Size(), 0)))); err != nil {
			return err
		}
		return rehash(args[0], args[1])
	})
	// unlist DIR FILE: remove FILE and its manifest entry.
	ts.Commands["unlist"] = command(2, "unlist DIR FILE", func(args []string) error {
		if err := os.Remove(filepath.Join(args[0], args[1])); err != nil {
			return err
		}
		return editJSON(filepath.Join(args[0], "manifest.json"), func(m map[string]any) {
			delete(m["files"].(map[string]any), args[1])
		})
	})
	// dupmember FILE NAME VALUE: insert "NAME": VALUE as the first member
	// of the top-level object, whatever else names it (a forger's second
	// key).
	ts.Commands["dupmember"] = command(3, "dupmember FILE NAME VALUE", func(args []string) error {
		data, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		i := bytes.IndexByte(data, '{')
		if i < 0 {
			return fmt.Errorf("%s: no object", args[0])
		}
		member := fmt.Sprintf("\n  %q: %s,", args[1], args[2])
		data = append(data[:i+1:i+1], append([]byte(member), data[i+1:]...)...)
		return writeFile(args[0], data)
	})
	// symlink TARGET LINK: make LINK a symbolic link to TARGET.
	ts.Commands["symlink"] = command(2, "symlink TARGET LINK", func(args []string) error {
		return os.Symlink(args[0], args[1])
	})
	addChaosCommands(ts.Commands) // forge_test.go
	addForgeCommands(ts.Commands) // forge_test.go
	ts.Run(t, *update)
	if err := checkSnapshot(); err != nil {
		t.Fatal(err)
	}
}

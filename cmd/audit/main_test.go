package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmdtest"
)

var update = flag.Bool("update", false, "update the .ct files with the commands' output")

// snapshot is a folder holding a copy of the checkout's source files and
// real evidence written by the runner from them; every .ct file starts
// from a copy of it. setupErr says why the snapshot could not be made.
var snapshot, setupErr string

// skipReason, if set, says why the golden tests cannot run here.
var skipReason string

// TestMain runs the real lab once, then snapshots the sources and the
// evidence.
func TestMain(m *testing.M) {
	flag.Parse()
	tmp, err := os.MkdirTemp("", "audit-cmdtest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	snapshot = filepath.Join(tmp, "checkout")
	prepare(filepath.Join("..", ".."))
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// ownPaths are the audit's own files: taken from the working tree, so the
// goldens test the audit being edited. Everything else comes from the
// last commit, so that other people's half-done edits in the same
// checkout cannot break the snapshot.
var ownPaths = []string{"internal/audit", "cmd/audit", "schema/manifest.schema.json", "schema/results.schema.json",
	"schema/run.schema.json", "schema/retries.schema.json", "schema/jitter.schema.json",
	"schema/chaos.schema.json", "schema/statement.schema.json"}

// prepare builds the snapshot: the committed tree of repo with the
// audit's own files from the working tree, as a fresh git repository of
// one commit (so source_commit can be checked), then runs the runner in
// it (go run ./cmd/runner -out evidence). Outside git it copies repo's
// working tree instead.
func prepare(repo string) {
	if err := exportHead(repo, snapshot); err != nil {
		if err := copySources(repo, snapshot); err != nil {
			setupErr = err.Error()
			return
		}
	} else {
		for _, p := range ownPaths {
			os.RemoveAll(filepath.Join(snapshot, p))
			if err := copyTree(filepath.Join(repo, p), filepath.Join(snapshot, p)); err != nil {
				setupErr = err.Error()
				return
			}
		}
	}
	os.RemoveAll(filepath.Join(snapshot, "evidence")) // the committed evidence: the runner writes anew
	if err := gitCommitAll(snapshot); err != nil {
		setupErr = err.Error()
		return
	}
	ev := filepath.Join(filepath.Dir(snapshot), "evidence")
	if err := runRunner(snapshot, "-out", ev); err != nil {
		setupErr = err.Error()
		return
	}
	if err := os.CopyFS(filepath.Join(snapshot, "evidence"), os.DirFS(ev)); err != nil {
		setupErr = err.Error()
		return
	}
	// The goldens show the postgres column (CI installs PostgreSQL);
	// without it the runner leaves the column out.
	if m, err := readJSON(filepath.Join(ev, "manifest.json")); err != nil {
		setupErr = err.Error()
		return
	} else if sel, _ := m["selection"].(map[string]any); !slices.Contains(sel["stores"].([]any), any("postgres")) {
		skipReason = "no PostgreSQL here: the goldens need the postgres column (CI installs it)"
		return
	}
	// A partial selection, as "runner -store volatile -experiment none"
	// writes it (cases only: no timing-dependent retries counts).
	vol := filepath.Join(filepath.Dir(snapshot), "volatile")
	if err := runRunner(snapshot, "-store", "volatile", "-experiment", "none", "-out", vol); err != nil {
		setupErr = err.Error()
		return
	}
	if err := os.CopyFS(filepath.Join(snapshot, "volatile"), os.DirFS(vol)); err != nil {
		setupErr = err.Error()
		return
	}
	// The evidence a runner with the pinned build writes: server_build
	// recorded, server_sha256 of a pinned build (made here as the runner
	// will make it).
	if err := pinnedEvidence(snapshot); err != nil {
		setupErr = err.Error()
		return
	}
	// The in-toto statement the current runner writes beside the manifest
	// (statement_fixture_test.go).
	for _, d := range []string{"evidence", "volatile", "pinned"} {
		if err := stampStatement(snapshot, filepath.Join(snapshot, d)); err != nil {
			setupErr = err.Error()
			return
		}
	}
	// The chaos experiment's evidence, for the forge-chaos-*.ct goldens.
	if err := chaosEvidence(repo, snapshot); err != nil {
		setupErr = err.Error()
	}
}

// runRunner runs go run ./cmd/runner ARGS in dir. The retries experiment's
// counts depend on real timing, and on a loaded machine a claim such as
// "retry-same-key loses nothing" can fail (the audit then fails the run, as
// it must); up to five tries keep that from failing the goldens.
func runRunner(dir string, args ...string) error {
	var err error
	for try := 0; try < 5; try++ {
		os.RemoveAll(args[len(args)-1]) // the -out folder of a failed try
		cmd := exec.Command("go", append([]string{"run", "./cmd/runner"}, args...)...)
		cmd.Dir = dir
		var b []byte
		if b, err = cmd.CombinedOutput(); err == nil || onlyStatementMissing(b) { // statement_fixture_test.go
			return nil
		}
		err = fmt.Errorf("go run ./cmd/runner %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return err
}

// pinnedEvidence writes snapshot/pinned: a copy of snapshot/evidence whose
// manifest records the pinned server build and its SHA-256.
func pinnedEvidence(root string) error {
	bin := filepath.Join(filepath.Dir(root), "effectserver-pinned")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", bin, "./cmd/effectserver")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off", "GOTOOLCHAIN=local", "GOENV=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pinned build: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	pinned := filepath.Join(root, "pinned")
	if err := os.CopyFS(pinned, os.DirFS(filepath.Join(root, "evidence"))); err != nil {
		return err
	}
	return editJSON(filepath.Join(pinned, "manifest.json"), func(m map[string]any) {
		m["server_sha256"] = hex.EncodeToString(sum[:])
		m["server_build"] = map[string]any{"package": "./cmd/effectserver", "flags": []string{"-trimpath", "-buildvcs=false"},
			"env": []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off"}, "prebuilt": false}
	})
}

// goldenBase is the commit whose runner writes the goldens' evidence: a
// fixed one, because the checkout is shared with work in progress and a
// runner mid-refactor must not break the audit's tests. Set
// IDEMLAB_GOLDEN_BASE (e.g. to HEAD) to test against another; where the
// commit is unknown (a shallow clone), HEAD is used.
const goldenBase = "578e7040b7cc387a5017014b7e85595e2606129c"

// exportHead writes the files of the golden base commit into dir.
func exportHead(repo, dir string) error {
	base := os.Getenv("IDEMLAB_GOLDEN_BASE")
	if base == "" {
		base = goldenBase
		if exec.Command("git", "-C", repo, "cat-file", "-e", base+"^{commit}").Run() != nil {
			base = "HEAD"
		}
	}
	cmd := exec.Command("git", "-C", repo, "archive", "--format=tar", base)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git archive %s: %v", base, err)
	}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg || !filepath.IsLocal(h.Name) {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, filepath.FromSlash(h.Name)), data); err != nil {
			return err
		}
	}
}

// copyTree copies the regular file or folder from to to.
func copyTree(from, to string) error {
	fi, err := os.Lstat(from)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		return writeFile(to, data)
	}
	return os.CopyFS(to, os.DirFS(from))
}

// gitCommitAll makes dir a git repository holding its files in one commit
// with a fixed author and date, so its hash is the same on every run.
func gitCommitAll(dir string) error {
	env := append(os.Environ(), "GIT_AUTHOR_NAME=audit", "GIT_AUTHOR_EMAIL=audit@idemlab.invalid",
		"GIT_COMMITTER_NAME=audit", "GIT_COMMITTER_EMAIL=audit@idemlab.invalid",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "--no-gpg-sign", "-m", "snapshot"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// copySources copies go.mod, go.sum and every regular file under cmd/,
// internal/, cases/, schema/ but _test.go files and testdata folders.
func copySources(from, to string) error {
	files := []string{"go.mod", "go.sum"}
	for _, dir := range []string{"cmd", "internal", "cases", "schema"} {
		err := filepath.WalkDir(filepath.Join(from, dir), func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == "testdata":
				return filepath.SkipDir
			case d.Type().IsRegular() && !strings.HasSuffix(p, "_test.go"):
				rel, _ := filepath.Rel(from, p)
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(to, f), data); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.WriteFile(name, data, 0o644)
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
	if err := os.WriteFile(name, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return restampAfter(name) // statement_fixture_test.go
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
	if file == "manifest.json" || file == "statement.intoto.json" { // unlisted; the statement is restamped (statement_fixture_test.go)
		return restampAfter(filepath.Join(dir, file))
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

func TestAuditCommand(t *testing.T) {
	if setupErr != "" {
		t.Fatal(setupErr)
	}
	if skipReason != "" {
		t.Skip(skipReason)
	}
	ts, err := cmdtest.Read("testdata")
	if err != nil {
		t.Fatal(err)
	}
	ts.Setup = func(rootDir string) error {
		return os.CopyFS(rootDir, os.DirFS(snapshot))
	}
	ts.Commands["audit"] = scrubCounts(cmdtest.InProcessProgram("audit", func() int {
		return run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	}))

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
		return os.WriteFile(args[0], data, 0o644)
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
		f, err := os.OpenFile(args[0], os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(strings.Join(args[1:], " ") + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
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
		if err := os.WriteFile(name, append(data, '\n'), 0o644); err != nil {
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
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
		return rehash(args[0], args[1])
	})
	// overwrite DIR FILE TEXT...: make DIR/FILE hold the words and a
	// newline, then rehash FILE.
	ts.Commands["overwrite"] = command(-3, "overwrite DIR FILE TEXT...", func(args []string) error {
		if err := os.WriteFile(filepath.Join(args[0], args[1]), []byte(strings.Join(args[2:], " ")+"\n"), 0o644); err != nil {
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
		f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.Write(bytes.Repeat([]byte(" "), int(max(n-fi.Size(), 0))))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
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
		return os.WriteFile(args[0], data, 0o644)
	})
	// symlink TARGET LINK: make LINK a symbolic link to TARGET.
	ts.Commands["symlink"] = command(2, "symlink TARGET LINK", func(args []string) error {
		return os.Symlink(args[0], args[1])
	})
	addChaosCommands(ts.Commands) // chaos_fixture_test.go
	ts.Run(t, *update)
}

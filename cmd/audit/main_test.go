package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmdtest"
	"github.com/rogpeppe/go-internal/txtar"

	"idemlab/internal/audit"
)

var update = flag.Bool("update", false, "update the stories' goldens with the commands' output")

// fixtureDir is the committed, frozen fixture every story starts from: a
// minimal checkout of data and the evidence folders the runner wrote, their
// manifests rewritten to describe it (testdata/fixture/README.md;
// regenerate with TestRegenerateFixture, fixture_regen_test.go).
const fixtureDir = "testdata/fixture"

// snapshot is a copy of the fixture whose root's sources are one git
// commit, the one the manifests name; setupErr says why it could not be
// made. snapshotFiles are its files but .git, read once: each story's
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

// TestMain makes the snapshot once; each story starts from links to it.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("GOGC") == "" {
		// The audits allocate much and keep little: fewer collections
		// cut the package's CPU time for twice the peak memory.
		debug.SetGCPercent(400)
	}
	tmp, err := os.MkdirTemp("", "audit-cmdtest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if snapshot, err = filepath.Abs(filepath.Join(tmp, "checkout")); err != nil {
		setupErr = err.Error()
	} else if snapshotFiles, err = prepare(snapshot); err != nil {
		setupErr = "the golden fixture: " + err.Error()
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// prepare copies the fixture into dir and commits its root's sources, as
// TestRegenerateFixture did when it wrote the manifests (the commit must be
// the manifests' source_commit), and returns the fixture's files.
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
	if err := eachFile(dir, files, func(name string, f snapshotFile) error { return os.WriteFile(name, f.data, 0o644) }); err != nil {
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
			"the root's files changed after TestRegenerateFixture wrote them (run it again: -regenerate-fixture)", got, want)
	}
	return files, nil
}

// linkSnapshot fills dir with hard links to the snapshot's files (a copy
// where the file system refuses a link) and a .git file pointing to the
// snapshot's repository. The commands replace a file rather than write it
// in place (writeFile, apply), and TestAuditCommand checks afterwards that
// the snapshot is unchanged.
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
			return fmt.Errorf("snapshot file %s was written in place by a story's command (write with writeFile)", f.name)
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

// rootPaths are what the fixture root's one commit holds.
var rootPaths = []string{"go.mod", "go.sum", "cases", "schema", "targets", "internal", "cmd"}

// commitRoot makes dir a git repository of one commit holding rootPaths,
// with a fixed identity and date and no system or global git
// configuration, so that its hash depends on the files alone, and returns
// the hash: TestRegenerateFixture commits the root whose commit the
// manifests name with it, and TestMain its copy.
func commitRoot(dir string) (string, error) {
	const who, at = "audit fixture", "2026-01-01T00:00:00Z"
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME="+who, "GIT_COMMITTER_NAME="+who, "GIT_AUTHOR_DATE="+at, "GIT_COMMITTER_DATE="+at,
		"GIT_AUTHOR_EMAIL=fixture@idemlab.invalid", "GIT_COMMITTER_EMAIL=fixture@idemlab.invalid")
	var head []byte
	for _, args := range [][]string{{"init", "-q"}, append([]string{"add", "--"}, rootPaths...),
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
// never a write in place, because a story's folder starts as hard links to
// the snapshot's files (linkSnapshot).
func writeFile(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
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

// A story is one golden test: testdata/NAME.txtar. Its comment is a
// go-cmdtest script (commands, each with the output it gives); its files
// are what it forges, whole (written into the story's folder before the
// script runs) or as patches (NAME.diff, unified diffs against the fixture
// that the script applies, in order, with its apply command), so that a
// reader sees the forgery and its verdict in one file, and a rule change
// re-derives the fixture's files (audit -write) without touching a story.
type story struct {
	name    string
	path    string
	archive *txtar.Archive
}

// readStories reads every story of testdata.
func readStories() ([]story, error) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txtar"))
	if err != nil {
		return nil, err
	}
	var out []story
	for _, p := range paths {
		a, err := txtar.ParseFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, story{strings.TrimSuffix(filepath.Base(p), ".txtar"), p, a})
	}
	return out, nil
}

// setup fills root with the fixture and the story's whole files.
func (s story) setup(root string) error {
	if err := linkSnapshot(root); err != nil {
		return err
	}
	for _, f := range s.archive.Files {
		if strings.HasSuffix(f.Name, ".diff") {
			continue
		}
		if err := writeFile(filepath.Join(root, filepath.FromSlash(f.Name)), f.Data); err != nil {
			return err
		}
	}
	return nil
}

// patch returns the story's patch NAME, for its apply command.
func (s story) patch(name string) ([]byte, error) {
	for _, f := range s.archive.Files {
		if f.Name == name {
			return f.Data, nil
		}
	}
	return nil, fmt.Errorf("the story has no file %s", name)
}

// Ensure every story of testdata/*.txtar gives its recorded output: each
// runs in a fresh copy of the fixture, forging what its comment says.
func TestAuditCommand(t *testing.T) {
	if setupErr != "" {
		t.Fatal(setupErr)
	}
	stories, err := readStories()
	if err != nil {
		t.Fatal(err)
	}
	if len(stories) == 0 {
		t.Fatal("no story in testdata")
	}
	for _, s := range stories {
		t.Run(s.name, func(t *testing.T) {
			dir := t.TempDir()
			ct := filepath.Join(dir, s.name+".ct")
			if err := os.WriteFile(ct, s.archive.Comment, 0o644); err != nil {
				t.Fatal(err)
			}
			ts, err := cmdtest.Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			ts.Setup = s.setup
			addCommands(ts.Commands, s)
			ts.Run(t, *update)
			if !*update {
				return
			}
			comment, err := os.ReadFile(ct)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(comment, s.archive.Comment) {
				s.archive.Comment = comment
				if err := os.WriteFile(s.path, txtar.Format(s.archive), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if err := checkSnapshot(); err != nil {
		t.Fatal(err)
	}
}

// addCommands registers the commands a story's script may run.
func addCommands(cmds map[string]cmdtest.CommandFunc, s story) {
	// audit ARGS: the command's run, its streams a buffer (no process-wide
	// redirection), in the story's folder.
	cmds["audit"] = scrubCounts(func(args []string, _ string) ([]byte, error) {
		var out bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &out); code != 0 {
			return out.Bytes(), &cmdtest.ExitCodeErr{Msg: "audit failed", Code: code}
		}
		return out.Bytes(), nil
	})
	// apply PATCH: apply the story's unified diff PATCH (git apply), the
	// files it touches first unlinked from the snapshot.
	cmds["apply"] = command(1, "apply PATCH", func(args []string) error {
		data, err := s.patch(args[0])
		if err != nil {
			return err
		}
		return apply(data)
	})
	// rehash DIR: record in DIR/manifest.json the SHA-256 of every file it
	// lists, as a forger covering their tracks would.
	cmds["rehash"] = command(1, "rehash DIR", func(args []string) error { return rehash(args[0]) })
	// derive DIR: have the audit write its derived files for DIR as it now
	// is (audit -write, whatever its verdict), as a forger with the
	// audit's own code would.
	cmds["derive"] = command(1, "derive DIR", func(args []string) error { return derive(".", args[0]) })
	// pin DIR: record in DIR/manifest.json the SHA-256 and Go version of
	// the root's stand-in server built by the local Go with the pinned
	// recipe (pin_test.go), as a runner on this machine would have, so that
	// -rebuild can reproduce it whatever Go runs the tests; then derive.
	cmds["pin"] = command(1, "pin DIR", func(args []string) error {
		if err := pin(".", args[0]); err != nil {
			return err
		}
		return derive(".", args[0])
	})
	// grow FILE N: append spaces (still the same JSON) until FILE is N
	// bytes.
	cmds["grow"] = command(2, "grow FILE N", func(args []string) error {
		n, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		return writeFile(args[0], append(data, bytes.Repeat([]byte(" "), int(max(n-int64(len(data)), 0)))...))
	})
	// set FILE PATH VALUE: set the member at PATH (dot-separated) of the
	// JSON object in FILE to the JSON VALUE: for a value only the machine
	// running the story knows before it (after pin).
	cmds["set"] = command(3, "set FILE PATH VALUE", func(args []string) error {
		doc, err := readJSON(args[0])
		if err != nil {
			return err
		}
		var v any
		if err := json.Unmarshal([]byte(args[2]), &v); err != nil {
			return fmt.Errorf("VALUE %s: %v", args[2], err)
		}
		m, path := doc, strings.Split(args[1], ".")
		for _, p := range path[:len(path)-1] {
			if m, _ = m[p].(map[string]any); m == nil {
				return fmt.Errorf("%s: %s: not an object", args[0], p)
			}
		}
		m[path[len(path)-1]] = v
		return writeJSON(args[0], doc)
	})
	cmds["rm"] = command(1, "rm FILE", func(args []string) error { return os.Remove(args[0]) })
	// cp FROM TO: copy a file.
	cmds["cp"] = command(2, "cp FROM TO", func(args []string) error {
		data, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		return writeFile(args[1], data)
	})
	// symlink TARGET LINK: make LINK a symbolic link to TARGET.
	cmds["symlink"] = command(2, "symlink TARGET LINK", func(args []string) error {
		if err := os.Remove(args[1]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return os.Symlink(args[0], args[1])
	})
	// copydir FROM TO: copy a folder.
	cmds["copydir"] = command(2, "copydir FROM TO", func(args []string) error { return os.CopyFS(args[1], os.DirFS(args[0])) })
}

// apply applies a unified diff to the current folder with git apply, each
// file it touches first replaced by a copy of its own (never written
// through a hard link into the snapshot).
func apply(patch []byte) error {
	for _, m := range regexp.MustCompile(`(?m)^--- a/(\S+)$`).FindAllSubmatch(patch, -1) {
		name := filepath.FromSlash(string(m[1]))
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		if err := writeFile(name, data); err != nil {
			return err
		}
	}
	cmd := exec.Command("git", "apply", "--whitespace=nowarn", "-")
	cmd.Stdin = bytes.NewReader(patch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git apply: %v\n%s", err, out)
	}
	return nil
}

// rehash records the SHA-256 of every file DIR/manifest.json lists.
func rehash(dir string) error {
	name := filepath.Join(dir, "manifest.json")
	m, err := readJSON(name)
	if err != nil {
		return err
	}
	files, _ := m["files"].(map[string]any)
	for f := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			continue // a story removed it: the audit says so
		}
		files[f] = sha256Hex(data)
	}
	return writeJSON(name, m)
}

// writeJSON writes v into name as the runner writes evidence: two-space
// indent, no HTML escaping, a final newline.
func writeJSON(name string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return writeFile(name, b.Bytes())
}

// derive runs the audit with -write on dir against root, ignoring its
// verdict (a forger re-renders whatever the audit thinks).
func derive(root, dir string) error {
	// An unreadable folder derives nothing; the story's audit says why.
	audit.Audit(audit.Options{Root: root, Evidence: dir, Write: true, AllowDirty: true, AllowMutation: true})
	return nil
}

// command wraps a function as a cmdtest command taking nargs arguments (at
// least -nargs when negative).
func command(nargs int, usage string, f func(args []string) error) cmdtest.CommandFunc {
	return func(args []string, _ string) ([]byte, error) {
		if nargs >= 0 && len(args) != nargs || nargs < 0 && len(args) < -nargs {
			return nil, fmt.Errorf("usage: %s", usage)
		}
		return nil, f(args)
	}
}

// scrubs replace what differs from machine to machine (the local Go
// version), so that a golden holds only what the evidence decides.
var scrubs = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`the local Go is go[0-9a-z.]+`), "the local Go is GOVERSION"},
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

// Ensure every story says in its first lines what it forges: the comment
// opens with "#" lines before its first command.
func TestStoriesSayWhatTheyForge(t *testing.T) {
	stories, err := readStories()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stories {
		first, _, _ := bytes.Cut(s.archive.Comment, []byte("\n"))
		if !bytes.HasPrefix(first, []byte("# ")) {
			t.Errorf("%s: the story does not open with a comment saying what it forges", s.path)
		}
		for _, f := range s.archive.Files {
			if strings.HasSuffix(f.Name, ".diff") && !slices.ContainsFunc(strings.Split(string(s.archive.Comment), "\n"), func(l string) bool {
				return strings.HasPrefix(l, "$ apply "+f.Name)
			}) {
				t.Errorf("%s: patch %s is never applied", s.path, f.Name)
			}
		}
	}
}

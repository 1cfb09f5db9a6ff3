// Auditfixture regenerates cmd/audit's frozen golden fixture from the
// runner, so that the audit's golden tests audit real evidence in seconds,
// with no lab run; cmd/audit/testdata/fixture/README.md says what the
// fixture holds and why.
//
// Run `go run ./cmd/auditfixture -h` for its usage, flags and exit statuses.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"idemlab/internal/audit"
	"idemlab/internal/audit/strict"
	"idemlab/internal/evidence"
	"idemlab/internal/flaghelp"
	"idemlab/internal/labbuild"
	"idemlab/internal/protocol"
	"idemlab/internal/retries"
	"idemlab/internal/runner"
	"idemlab/internal/target"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// DefaultOut is where the fixture goes, relative to the checkout's root.
const DefaultOut = "cmd/audit/testdata/fixture"

// maxTries bounds -tries.
const maxTries = 10

// help is the -h text; %s is where the flags go (flaghelp.Flags).
const help = `usage: go run ./cmd/auditfixture [-out DIR] [-tries N]
       go run ./cmd/auditfixture -derive [-out DIR]

Auditfixture regenerates cmd/audit's golden fixture from the runner: it runs
the lab five times (a few cases on every store and two targets; each
experiment on its own; a signed run), each run audited by the runner's own
audit, then rewrites what ties each evidence folder to this checkout - the
manifest's sources, commit and server build, and the target folders'
digests - to describe a minimal checkout of data instead (the case files
run, the schemas, stand-ins for the target folders, the protocol constants
and a stand-in server), and has the audit derive its files again there
(cmd/audit/testdata/fixture/README.md says what the fixture holds). Run it
from the root of the idemlab checkout, on a machine with PostgreSQL's
server programs and the targets' programs (node, npm, redis-server), then
run go test ./cmd/audit -update and review the goldens' diff.

-derive runs no lab: after a change of the audit's rules or renderings, it
has the audit write every folder's derived files again (audit -write, the
signed folder signed again), so that the stories' forgeries still apply.

Flags:
%s
Exit status:
  0  the fixture was written
  1  a runner's own audit failed on every try (the retries experiment's
     counts depend on timing: run it again on a quieter machine)
  2  usage: a bad flag, or not run from the idemlab checkout
  3  the lab or the rewrite broke (a build, PostgreSQL missing, a manifest
     that no longer round-trips through evidence.Manifest, a rewritten
     folder that fails its audit, ...)
`

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("auditfixture", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, help by -h
	out := fs.String("out", DefaultOut, "write the fixture into the folder `DIR` (its README.md is kept)")
	tries := fs.Int("tries", 3, "runs of each runner invocation before giving up when its own audit fails")
	deriveOnly := fs.Bool("derive", false, "run no lab: write the fixture's derived files again with the audit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, help, flaghelp.Flags(fs, nil, func(f *flag.Flag) string {
				if f.Name == "tries" {
					return fmt.Sprintf("1..%d", maxTries)
				}
				return ""
			}))
			return 0
		}
		fmt.Fprintf(stderr, "auditfixture: %v (see -h)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "auditfixture: unexpected argument %q (see -h)\n", fs.Arg(0))
		return 2
	}
	if *tries < 1 || *tries > maxTries {
		fmt.Fprintf(stderr, "auditfixture: -tries %d: want 1..%d\n", *tries, maxTries)
		return 2
	}
	if err := checkCheckout("."); err != nil {
		fmt.Fprintf(stderr, "auditfixture: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	wrote, err := *out, error(nil)
	if *deriveOnly {
		wrote, err = "the derived files of "+*out, deriveAll(*out, SignKey)
	} else {
		err = regenerate(ctx, ".", *out, *tries, stdout)
	}
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "wrote %s: now run go test ./cmd/audit -update and review the goldens' diff\n", wrote)
		return 0
	case errors.Is(err, runner.ErrAuditFailed):
		fmt.Fprintf(stderr, "auditfixture: %v\n", err)
		return 1
	default:
		fmt.Fprintf(stderr, "auditfixture: %v\n", err)
		return 3
	}
}

// checkCheckout refuses a folder that is not the idemlab checkout's root.
func checkCheckout(root string) error {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.HasPrefix(data, []byte("module idemlab\n")) {
		return errors.New("run it from the root of the idemlab checkout (no go.mod of module idemlab here)")
	}
	return nil
}

// The fixture's selection: a few cases that between them show every kind
// of check, on every store and two targets (the lab's own server as one,
// and a real library); chaos on every store and two targets, short and
// with few clients so that a history stays small enough for a story.
var (
	fixtureCases   = []string{"keyed_lost_reply", "concurrent_duplicate", "body_conflict", "restart_after_reply", "crash_after_effect", "oversized_key_and_body", "downstream_crash_after_ledger_forwarded"}
	fixtureTargets = []string{"effectserver-volatile", "express-idempotency"}
	chaosTargets   = []string{"effectserver-durable", "express-idempotency"}
	chaosOptions   = runner.ChaosOptions{Duration: time.Second, Clients: 2}
)

// A folder is one evidence folder of the fixture and its runner invocation.
type folder struct {
	name string
	opts func(o *runner.Options)
}

// folders are the fixture's evidence folders, as the goldens use them.
var folders = []folder{
	{"evidence", func(o *runner.Options) {
		o.Case, o.StoresGiven, o.Targets = strings.Join(fixtureCases, ","), true, fixtureTargets
	}},
	{"retries", func(o *runner.Options) { o.Experiment = runner.Retries }},
	{"jitter", func(o *runner.Options) { o.Experiment = runner.Jitter }},
	{"chaos", func(o *runner.Options) {
		o.Experiment, o.StoresGiven, o.Targets, o.Chaos = runner.Chaos, true, chaosTargets, chaosOptions
	}},
	{"signed", func(o *runner.Options) {
		o.Case, o.Stores, o.PostgresAsked, o.StoresGiven = "keyed_lost_reply", []protocol.Store{protocol.Volatile}, false, true
		o.SignKey = filepath.Join(o.Root, filepath.FromSlash(SignKey))
	}},
}

// SignKey signs the fixture's signed/ folder (runner -sign); the goldens
// verify it with cmd/audit/testdata/fixture/keys/test_ed25519.pub.
const SignKey = "internal/audit/dsse/testdata/keys/test_ed25519"

// regenerate writes the fixture into out: the runs, then the root they
// are rewritten to describe, then each folder rewritten and derived again.
func regenerate(ctx context.Context, checkout, out string, tries int, log io.Writer) error {
	tmp, err := os.MkdirTemp("", "auditfixture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "runs"), 0o755); err != nil {
		return err
	}
	for _, f := range folders {
		if err := runRunner(ctx, checkout, filepath.Join(tmp, "runs", f.name), f, tries, log); err != nil {
			return err
		}
	}
	if err := cutHistories(checkout, filepath.Join(tmp, "runs", "chaos"), log); err != nil {
		return err
	}
	root := filepath.Join(tmp, "root")
	fix, err := makeRoot(ctx, checkout, root, tmp)
	if err != nil {
		return fmt.Errorf("fixture root: %w", err)
	}
	for _, f := range folders {
		dir := filepath.Join(root, f.name)
		if err := os.CopyFS(dir, os.DirFS(filepath.Join(tmp, "runs", f.name))); err != nil {
			return err
		}
		if err := fix.rewrite(dir); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if err := derive(root, dir, f.name == "signed", filepath.Join(checkout, filepath.FromSlash(SignKey))); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return replaceFixture(root, out)
}

// makeRoot writes the fixture's root of data, commits it and builds its
// stand-in server, and returns what the rewrite puts into each folder.
func makeRoot(ctx context.Context, checkout, root, tmp string) (fixup, error) {
	if err := writeRoot(checkout, root); err != nil {
		return fixup{}, err
	}
	fix := fixup{digests: map[string]string{}}
	schemas, err := strict.LoadSchemas(filepath.Join(root, "schema"))
	if err != nil {
		return fixup{}, err
	}
	for _, name := range slices.Concat(fixtureTargets, chaosTargets) {
		t, err := target.Load(filepath.Join(root, "targets", name), schemas)
		if err != nil {
			return fixup{}, err
		}
		if fix.digests[name], err = t.Digest(); err != nil {
			return fixup{}, err
		}
	}
	if fix.commit, err = Commit(root); err != nil {
		return fixup{}, err
	}
	if fix.server, err = labbuild.Build(ctx, labbuild.Options{Root: root, Package: "./cmd/effectserver", CacheDir: filepath.Join(tmp, "bin")}); err != nil {
		return fixup{}, fmt.Errorf("stand-in server: %w", err)
	}
	fix.sources, err = evidence.Sources(root)
	return fix, err
}

// historyIntents bounds the intents of each chaos history of the fixture.
const historyIntents = 25

// cutHistories cuts every chaos history of dir with testdata/spec/cut to its
// first intents, at most historyIntents, that leave no intent number out
// (the audit requires 0, 1, ...).
func cutHistories(checkout, dir string, log io.Writer) error {
	paths, err := filepath.Glob(filepath.Join(dir, "chaos-*.jsonl"))
	if err != nil {
		return err
	}
	for _, p := range paths {
		var cut []byte
		for n := historyIntents; n > 0 && cut == nil; n-- {
			cmd := exec.Command("go", "run", "./testdata/spec/cut", "-intents", strconv.Itoa(n), p)
			cmd.Dir = checkout
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("cut %s: %w", p, err)
			}
			if gapless(out) {
				cut = out
			}
		}
		if cut == nil {
			return fmt.Errorf("cut %s: no gapless cut", p)
		}
		fmt.Fprintf(log, "== auditfixture: %s cut to %d bytes\n", filepath.Base(p), len(cut))
		if err := os.WriteFile(p, cut, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// gapless reports whether a history's attempts are of every intent 0..n-1.
func gapless(history []byte) bool {
	seen := map[int]bool{}
	for _, line := range bytes.Split(history, []byte("\n")) {
		var a struct {
			Kind   string `json:"kind"`
			Intent int    `json:"intent"`
		}
		if json.Unmarshal(line, &a) == nil && a.Kind == "attempt" {
			seen[a.Intent] = true
		}
	}
	for i := range len(seen) {
		if !seen[i] {
			return false
		}
	}
	return len(seen) > 0
}

// deriveAll writes the derived files of every folder of the fixture in out
// again, in a copy made a git repository as cmd/audit's tests make it.
func deriveAll(out, key string) error {
	tmp, err := os.MkdirTemp("", "auditfixture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if err := os.CopyFS(root, os.DirFS(out)); err != nil {
		return err
	}
	if _, err := Commit(root); err != nil {
		return err
	}
	for _, f := range folders {
		if err := derive(root, filepath.Join(root, f.name), f.name == "signed", key); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if err := os.RemoveAll(filepath.Join(out, f.name)); err != nil {
			return err
		}
		if err := os.CopyFS(filepath.Join(out, f.name), os.DirFS(filepath.Join(root, f.name))); err != nil {
			return err
		}
	}
	return nil
}

// derive has the audit write its derived files into dir, as the runner had
// it do (signed, for a signed folder); the folder must pass.
func derive(root, dir string, signed bool, key string) error {
	opts := audit.Options{Root: root, Evidence: dir, Write: true}
	if signed {
		opts.SignKey = key
	}
	r, err := audit.Audit(opts)
	if err != nil {
		return err
	}
	if !r.Pass {
		var b strings.Builder
		r.WriteText(&b)
		return fmt.Errorf("the rewritten folder fails its audit:\n%s", b.String())
	}
	return nil
}

// runRunner runs the runner in process into dir, up to tries times while
// its own audit fails (the retries experiment's claims depend on timing).
func runRunner(ctx context.Context, checkout, dir string, f folder, tries int, log io.Writer) error {
	var err error
	for try := 1; try <= tries; try++ {
		if err = os.RemoveAll(dir); err != nil {
			return err
		}
		o := runner.Options{Root: checkout, Out: dir, Stores: protocol.Stores, PostgresAsked: true, Seed: 1,
			Intents: runner.DefaultIntents, Retries: retries.Default, Stdout: log, Stderr: log}
		f.opts(&o)
		fmt.Fprintf(log, "== auditfixture: %s (try %d of %d)\n", f.name, try, tries)
		if err = runner.Run(ctx, o); !errors.Is(err, runner.ErrAuditFailed) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("runner for %s: %w", f.name, err)
	}
	return nil
}

// writeRoot writes the fixture's root of data: go.mod, go.sum, schema/, the
// case files run, stand-ins for the target folders and the server, and the
// protocol constants.
func writeRoot(checkout, root string) error {
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := copyFile(filepath.Join(checkout, f), filepath.Join(root, f)); err != nil {
			return err
		}
	}
	if err := os.CopyFS(filepath.Join(root, "schema"), os.DirFS(filepath.Join(checkout, "schema"))); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(checkout, "cases", "*.json"))
	if err != nil {
		return err
	}
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".json")
		if slices.Contains(fixtureCases, base[strings.Index(base, "-")+1:]) {
			if err := copyFile(f, filepath.Join(root, "cases", filepath.Base(f))); err != nil {
				return err
			}
		}
	}
	for _, name := range slices.Concat(fixtureTargets, chaosTargets) {
		if err := writeTarget(filepath.Join(checkout, "targets", name), filepath.Join(root, "targets", name)); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(root, "internal", "protocol", "protocol.go"), protocolFile()); err != nil {
		return err
	}
	return writeFile(filepath.Join(root, "cmd", "effectserver", "main.go"), []byte(standInServer))
}

// writeTarget writes a stand-in for a target folder: what the audit reads
// (target.json, the lock file) and a README, never the program.
func writeTarget(from, to string) error {
	for _, f := range []string{"target.json", "package-lock.json"} {
		err := copyFile(filepath.Join(from, f), filepath.Join(to, f))
		if err != nil && (f == "target.json" || !errors.Is(err, fs.ErrNotExist)) {
			return err
		}
	}
	readme := "# Stand-in for targets/" + filepath.Base(from) + "\n\nWritten by go run ./cmd/auditfixture: the audit reads this folder's\ntarget.json and lock file and digests it; it never runs the target, so the\nprogram is not here (see ../../README.md).\n"
	return writeFile(filepath.Join(to, "README.md"), []byte(readme))
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return writeFile(to, data)
}

// standInServer is the fixture's cmd/effectserver, which audit -rebuild builds.
const standInServer = `// Command effectserver is the audit fixture's stand-in for the lab's server
// (written by go run ./cmd/auditfixture): audit -rebuild builds
// ./cmd/effectserver from -root with the pinned recipe and compares the
// binary's SHA-256 with the manifest's server_sha256, and in the fixture
// this is the program it builds. See ../../README.md.
package main

func main() {}
`

// protocolFile renders the protocol constants the manifest records, which
// the audit reads from ROOT/internal/protocol with go/parser.
func protocolFile() []byte {
	var b bytes.Buffer
	b.WriteString("// Package protocol holds, for the audit fixture, the constants of the lab's\n" +
		"// internal/protocol that the manifest records, with the lab's values\n" +
		"// (written by go run ./cmd/auditfixture; the audit reads them with\n" +
		"// go/parser). See ../../README.md.\n" +
		"package protocol\n\nimport \"time\"\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%d * time.Millisecond", d.Milliseconds()) }
	for _, c := range [][2]string{
		{"EffectPath", strconv.Quote(protocol.EffectPath)}, {"KeyHeader", strconv.Quote(protocol.KeyHeader)},
		{"ReplayedHeader", strconv.Quote(protocol.ReplayedHeader)}, {"FaultHeader", strconv.Quote(protocol.FaultHeader)},
		{"KeyPattern", strconv.Quote(protocol.KeyPattern)}, {"DefaultBody", strconv.Quote(protocol.DefaultBody)},
		{"DefaultCapacity", strconv.Itoa(protocol.DefaultCapacity)}, {"DefaultMaxBody", strconv.Itoa(protocol.DefaultMaxBody)},
		{"DefaultWait", ms(protocol.DefaultWait)}, {"SlowDelay", ms(protocol.SlowDelay)},
		{"CrashExitCode", strconv.Itoa(protocol.CrashExitCode)}, {"DefaultClientTimeout", ms(protocol.DefaultClientTimeout)},
	} {
		fmt.Fprintf(&b, "\n// %s is protocol.%s.\nconst %s = %s\n", c[0], c[0], c[0], c[1])
	}
	return b.Bytes()
}

// CommitEnv fixes the identity and date of the fixture root's one commit,
// and keeps git's configuration out, so that its hash depends on the files
// alone: cmd/audit's TestMain makes the same commit.
var CommitEnv = []string{
	"GIT_AUTHOR_NAME=audit fixture", "GIT_AUTHOR_EMAIL=fixture@idemlab.invalid", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
	"GIT_COMMITTER_NAME=audit fixture", "GIT_COMMITTER_EMAIL=fixture@idemlab.invalid", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
}

// CommitPaths are what the commit holds (those the root has).
var CommitPaths = []string{"go.mod", "go.sum", "cases", "schema", "targets", "internal", "cmd"}

// Commit commits CommitPaths as root's one git commit and returns its hash.
func Commit(root string) (string, error) {
	env := append(os.Environ(), CommitEnv...)
	var paths []string
	for _, p := range CommitPaths {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			paths = append(paths, p)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, append([]string{"add", "--"}, paths...),
		{"commit", "-q", "--no-gpg-sign", "--no-verify", "-m", "fixture"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	cmd := exec.Command("git", "rev-parse", "HEAD")
	cmd.Dir, cmd.Env = root, env
	head, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(head)), nil
}

// fixup is what the rewrite puts into a folder: the root's sources and
// commit, the stand-in server's build and the target folders' digests.
type fixup struct {
	commit  string
	sources map[string]string
	server  labbuild.Binary
	digests map[string]string // by target name
}

// rewrite makes dir describe the fixture's root: the targets' digests, the
// manifest's sources, commit, server build and file hashes; the audit's
// derived files go. It refuses a manifest that does not come back byte for
// byte through evidence.Manifest (a format this program no longer knows).
func (f fixup) rewrite(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if slices.Contains(evidence.DerivedNames, e.Name()) || evidence.DerivedPattern.MatchString(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := f.rewriteDigests(dir); err != nil {
		return err
	}
	name := filepath.Join(dir, evidence.ManifestName)
	orig, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	var m evidence.Manifest
	dec := json.NewDecoder(bytes.NewReader(orig))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if again, err := evidence.Marshal(m); err != nil || !bytes.Equal(again, orig) {
		return fmt.Errorf("%s: does not round-trip through evidence.Manifest (%v): update cmd/auditfixture", name, err)
	}
	m.Sources, m.SourceCommit, m.SourceDirty = f.sources, f.commit, false
	m.ServerSHA256, m.ServerBuild = f.server.SHA256, &f.server.Recipe
	for i, t := range m.Targets {
		m.Targets[i].Digest = f.digests[t.Name]
	}
	for file := range m.Files {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		m.Files[file] = evidence.SHA256(data)
	}
	mb, err := evidence.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(name, mb, 0o644)
}

// rewriteDigests sets every target's digest in targets.json and chaos.json
// to its stand-in's, in place (a digest is fixed-width hex).
func (f fixup) rewriteDigests(dir string) error {
	for _, file := range []string{evidence.TargetsName, "chaos.json"} {
		p := filepath.Join(dir, file)
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		var doc struct {
			Targets []struct{ Name, Digest string } `json:"targets"`
			Runs    []struct {
				Target string `json:"target"`
				Digest string `json:"target_digest"`
			} `json:"runs"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, t := range doc.Targets {
			data = bytes.ReplaceAll(data, []byte(t.Digest), []byte(f.digests[t.Name]))
		}
		for _, r := range doc.Runs {
			if r.Digest != "" {
				data = bytes.ReplaceAll(data, []byte(r.Digest), []byte(f.digests[r.Target]))
			}
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// replaceFixture replaces the sources and evidence folders in out by
// root's, never its .git; anything else (README.md) is kept.
func replaceFixture(root, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	entries := slices.Clone(CommitPaths)
	for _, f := range folders {
		entries = append(entries, f.name)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(out, e)); err != nil {
			return err
		}
		from := filepath.Join(root, e)
		fi, err := os.Stat(from)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			err = copyFile(from, filepath.Join(out, e))
		} else {
			err = os.CopyFS(filepath.Join(out, e), os.DirFS(from))
		}
		if err != nil {
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

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

	"idemlab/internal/evidence"
	"idemlab/internal/flaghelp"
	"idemlab/internal/labbuild"
	"idemlab/internal/protocol"
	"idemlab/internal/retries"
	"idemlab/internal/runner"
	"idemlab/internal/schemacheck"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// DefaultOut is where the fixture goes, relative to the checkout's root.
const DefaultOut = "cmd/audit/testdata/fixture"

// chaosDuration is the chaos phase per store of the fixture's runs: a
// second keeps the histories small (the audit reads them in every golden)
// and still sees kills (one every 500 ms) and faults.
const chaosDuration = time.Second

// maxTries bounds -tries.
const maxTries = 10

// help is the -h text; %s is where the flags go (flaghelp.Flags).
const help = `usage: go run ./cmd/auditfixture [-out DIR] [-tries N]

Auditfixture regenerates cmd/audit's golden fixture from the runner: it runs
the lab three times (a plain run, a partial one and a chaos-only one, chaos
for 1 s a store and a target), then rewrites each evidence folder's manifest
and in-toto statement, with the evidence package's own functions, to
describe a minimal checkout of data instead of the whole source tree
(cmd/audit/testdata/fixture/README.md says what the fixture holds). Run it
from the root of the idemlab checkout, on a machine with PostgreSQL's server
programs (the goldens show the postgres column), then run go test
./cmd/audit -update and review the goldens' diff.

Flags:
%s
Exit status:
  0  the fixture was written
  1  a runner's own audit failed on every try (the retries experiment's
     counts depend on timing: run it again on a quieter machine)
  2  usage: a bad flag, or not run from the idemlab checkout
  3  the lab or the rewrite broke (a build, PostgreSQL missing, a manifest
     that no longer round-trips through evidence.Manifest, ...)
`

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("auditfixture", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, help by -h
	out := fs.String("out", DefaultOut, "write the fixture into the folder `DIR` (its README.md is kept)")
	tries := fs.Int("tries", 3, "runs of each runner invocation before giving up when its own audit fails")
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
	err := regenerate(ctx, ".", *out, *tries, stdout)
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "wrote %s: now run go test ./cmd/audit -update and review the goldens' diff\n", *out)
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

// A folder is one evidence folder of the fixture and the runner
// invocation that writes it.
type folder struct {
	name string
	opts func(o *runner.Options)
}

// folders are the fixture's evidence folders, as the goldens use them.
var folders = []folder{
	{"evidence", func(o *runner.Options) {}},
	{"volatile", func(o *runner.Options) {
		o.Stores, o.PostgresAsked, o.StoresGiven, o.Experiment = []protocol.Store{protocol.Volatile}, false, true, runner.None
		o.SignKey = filepath.Join(o.Root, filepath.FromSlash(SignKey))
	}},
	{"chaos", func(o *runner.Options) { o.Experiment = runner.Chaos }},
}

// SignKey is the throwaway key the fixture's volatile/ folder is signed
// with (runner -sign), relative to the checkout: the goldens verify the
// signature with cmd/audit/testdata/fixture/keys/test_ed25519.pub.
const SignKey = "internal/evidence/testdata/keys/test_ed25519"

// regenerate writes the fixture into out.
func regenerate(ctx context.Context, checkout, out string, tries int, log io.Writer) error {
	tmp, err := os.MkdirTemp("", "auditfixture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if err := writeRoot(checkout, root); err != nil {
		return fmt.Errorf("fixture root: %w", err)
	}
	commit, err := Commit(root)
	if err != nil {
		return fmt.Errorf("fixture root: %w", err)
	}
	server, err := labbuild.Build(ctx, labbuild.Options{Root: root, Package: "./cmd/effectserver", CacheDir: filepath.Join(tmp, "bin")})
	if err != nil {
		return fmt.Errorf("fixture root: stand-in server: %w", err)
	}
	schemas, err := schemacheck.Load(filepath.Join(root, "schema"))
	if err != nil {
		return err
	}
	sources, err := evidence.Sources(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(tmp, "runs"), 0o755); err != nil {
		return err
	}
	for _, f := range folders {
		dir := filepath.Join(tmp, "runs", f.name)
		if err := runRunner(ctx, checkout, dir, f, tries, log); err != nil {
			return err
		}
		fix := fixup{commit: commit, sources: sources, server: server, signKey: filepath.Join(checkout, filepath.FromSlash(SignKey))}
		if err := fix.rewrite(dir, schemas); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if err := os.CopyFS(filepath.Join(root, f.name), os.DirFS(dir)); err != nil {
			return err
		}
	}
	return replaceFixture(root, out)
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
			Intents: runner.DefaultIntents, Retries: retries.Default, Chaos: runner.ChaosOptions{Duration: chaosDuration},
			Stdout: log, Stderr: log}
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

// writeRoot writes the fixture's root of data into root: go.mod, go.sum,
// cases/, schema/ and the shipped targets' folders from the checkout, the
// protocol constants and the stand-in server.
func writeRoot(checkout, root string) error {
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(checkout, f))
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(root, f), data); err != nil {
			return err
		}
	}
	for _, dir := range []string{"cases", "schema"} {
		if err := os.CopyFS(filepath.Join(root, dir), os.DirFS(filepath.Join(checkout, dir))); err != nil {
			return err
		}
	}
	if err := copyTargets(filepath.Join(checkout, "targets"), filepath.Join(root, "targets")); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(root, "internal", "protocol", "protocol.go"), protocolFile()); err != nil {
		return err
	}
	return writeFile(filepath.Join(root, "cmd", "effectserver", "main.go"), []byte(standInServer))
}

// copyTargets copies the shipped target folders as the runner digests them:
// every regular file, node_modules, .git and the setup marker left out.
func copyTargets(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && (name == "node_modules" || name == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasPrefix(name, ".idemlab-setup") {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		return writeFile(filepath.Join(to, rel), data)
	})
}

// standInServer is the fixture's cmd/effectserver: what audit -rebuild
// builds from the fixture's root.
const standInServer = `// Command effectserver is the audit fixture's stand-in for the lab's server
// (written by go run ./cmd/auditfixture): audit -rebuild builds
// ./cmd/effectserver from -root with the pinned recipe and compares the
// binary's SHA-256 with the manifest's server_sha256, and in the fixture
// this is the program it builds. See ../../README.md.
package main

func main() {}
`

// protocolFile renders the constants of the protocol package that the
// manifest records (and the audit reads from ROOT/internal/protocol with
// go/parser), with the lab's values, one declaration each.
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

// CommitEnv is the identity and date of the fixture root's one commit, so
// that its hash depends on the root's files alone; cmd/audit's TestMain
// makes the same commit (and checks it got the manifest's source_commit).
// No system or global git configuration is read.
var CommitEnv = []string{
	"GIT_AUTHOR_NAME=audit fixture", "GIT_AUTHOR_EMAIL=fixture@idemlab.invalid", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z",
	"GIT_COMMITTER_NAME=audit fixture", "GIT_COMMITTER_EMAIL=fixture@idemlab.invalid", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
}

// CommitPaths are what the commit holds: the root's source files (those
// the root has).
var CommitPaths = []string{"go.mod", "go.sum", "cases", "schema", "targets", "internal", "cmd"}

// Commit makes root a git repository whose one commit holds CommitPaths
// (git init; git add; git commit -m fixture, with CommitEnv) and returns
// the commit's hash.
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

// fixup is what the rewrite puts into a manifest: the fixture root's
// sources and commit, and the stand-in server's build.
type fixup struct {
	commit  string
	sources map[string]string
	server  labbuild.Binary
	signKey string // the key a signed folder's envelope is signed again with
}

// rewrite rewrites dir's manifest.json to describe the fixture's root and
// renders its statement again from it, keeping the tests the runner's own
// statement listed. It refuses a manifest that does not come back byte for
// byte through evidence.Manifest (a format this program no longer knows).
func (f fixup) rewrite(dir string, schemas *schemacheck.Set) error {
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
	tests, err := statementTests(filepath.Join(dir, evidence.StatementName))
	if err != nil {
		return err
	}
	m.Sources, m.SourceCommit, m.SourceDirty = f.sources, f.commit, false
	m.ServerSHA256, m.ServerBuild = f.server.SHA256, &f.server.Recipe
	mb, err := evidence.Marshal(m)
	if err != nil {
		return err
	}
	if err := schemas.Validate("manifest.schema.json", mb); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	sb, err := evidence.Statement(m, mb, tests)
	if err != nil {
		return err
	}
	if err := schemas.Validate("statement.schema.json", sb); err != nil {
		return fmt.Errorf("%s: %w", evidence.StatementName, err)
	}
	if err := os.WriteFile(name, mb, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, evidence.StatementName), sb, 0o644); err != nil {
		return err
	}
	// A signed folder's envelope signs the statement: sign the new one.
	env := filepath.Join(dir, evidence.EnvelopeName)
	if _, err := os.Stat(env); err != nil {
		return nil
	}
	key, err := os.ReadFile(f.signKey)
	if err != nil {
		return err
	}
	signer, err := evidence.ParseSigningKey(key)
	if err != nil {
		return err
	}
	eb, err := signer.Envelope(sb)
	if err != nil {
		return err
	}
	return os.WriteFile(env, eb, 0o644)
}

// statementTests reads the passed and failed tests of the runner's
// statement.
func statementTests(name string) (evidence.Tests, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return evidence.Tests{}, err
	}
	var st struct {
		Predicate struct {
			PassedTests []string `json:"passedTests"`
			FailedTests []string `json:"failedTests"`
		} `json:"predicate"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return evidence.Tests{}, fmt.Errorf("%s: %w", name, err)
	}
	return evidence.Tests{Passed: st.Predicate.PassedTests, Failed: st.Predicate.FailedTests}, nil
}

// replaceFixture replaces the root's sources (CommitPaths) and evidence
// folders in out by those of root, never its .git; anything else in out
// (README.md) is kept.
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
			data, err := os.ReadFile(from)
			if err != nil {
				return err
			}
			if err := writeFile(filepath.Join(out, e), data); err != nil {
				return err
			}
			continue
		}
		if err := os.CopyFS(filepath.Join(out, e), os.DirFS(from)); err != nil {
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

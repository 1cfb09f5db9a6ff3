package main

// Regenerating the golden fixture (testdata/fixture; its README.md says
// what it holds and why):
//
//	go test ./cmd/audit -run TestRegenerateFixture -regenerate-fixture -timeout 30m [-fixture-tries N]
//	go test ./cmd/audit -run TestRegenerateFixture -derive-fixture
//	go test ./cmd/audit -update    # then review the stories' diff
//
// -regenerate-fixture runs the lab five times from the checkout at ../..
// (a few cases on every store and two targets; each experiment on its own;
// a signed run), each run audited by the runner's own audit, then rewrites
// what ties each evidence folder to the checkout - the manifest's sources,
// commit and server build, and the target folders' digests - to describe a
// minimal checkout of data instead (the case files run, the schemas,
// stand-ins for the target folders, the protocol constants and a stand-in
// server), and has the audit derive its files again there. It needs
// PostgreSQL's server programs and the targets' programs (node, npm,
// redis-server). A runner whose own audit fails is run again, up to
// -fixture-tries times (the retries experiment's counts depend on timing).
//
// -derive-fixture runs no lab: after a change of the audit's rules or
// renderings, it has the audit write every folder's derived files again
// (audit -write, the signed folder signed again), so that the stories'
// forgeries still apply.
//
// This is the one file of cmd/audit's tests that links the lab's packages
// (TestAuditImportsNoLabPackage): the fixture is the lab's word, rewritten
// with the lab's own code; the audit judges it with its own.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/constant"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
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
	"testing"
	"time"

	"idemlab/internal/audit"
	"idemlab/internal/audit/strict"
	"idemlab/internal/evidence"
	"idemlab/internal/labbuild"
	"idemlab/internal/protocol"
	"idemlab/internal/retries"
	"idemlab/internal/runner"
	"idemlab/internal/target"
)

var (
	regenerateFixture = flag.Bool("regenerate-fixture", false, "TestRegenerateFixture: run the lab and write testdata/fixture again (minutes)")
	deriveFixture     = flag.Bool("derive-fixture", false, "TestRegenerateFixture: run no lab; write testdata/fixture's derived files again with the audit")
	fixtureTries      = flag.Int("fixture-tries", 3, "TestRegenerateFixture: runs of each runner invocation before giving up when its own audit fails")
)

// TestRegenerateFixture writes testdata/fixture again, when asked to
// (above); its README.md is kept.
func TestRegenerateFixture(t *testing.T) {
	if !*regenerateFixture && !*deriveFixture {
		t.Skip("regenerates testdata/fixture: run with -regenerate-fixture or -derive-fixture")
	}
	if *fixtureTries < 1 {
		t.Fatalf("-fixture-tries %d: want at least 1", *fixtureTries)
	}
	checkout, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if *deriveFixture {
		err = deriveAll(fixtureDir, signKey)
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = regenerate(ctx, checkout, fixtureDir, *fixtureTries, os.Stderr)
	}
	if err != nil {
		t.Fatal(err) // errors.Is(err, runner.ErrAuditFailed): run it again on a quieter machine
	}
	t.Logf("wrote %s: now run go test ./cmd/audit -update and review the goldens' diff", fixtureDir)
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

// A fixtureFolder is one evidence folder of the fixture and its runner
// invocation.
type fixtureFolder struct {
	name string
	opts func(o *runner.Options)
}

// fixtureFolders are the fixture's evidence folders, as the goldens use
// them.
var fixtureFolders = []fixtureFolder{
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
		o.SignKey = filepath.Join(o.Root, "cmd", "audit", filepath.FromSlash(signKey))
	}},
}

// regenerate writes the fixture into out: the runs, then the root they
// are rewritten to describe, then each folder rewritten and derived again.
func regenerate(ctx context.Context, checkout, out string, tries int, log io.Writer) error {
	tmp, err := os.MkdirTemp("", "audit-fixture-regen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "runs"), 0o755); err != nil {
		return err
	}
	for _, f := range fixtureFolders {
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
	for _, f := range fixtureFolders {
		dir := filepath.Join(root, f.name)
		if err := os.CopyFS(dir, os.DirFS(filepath.Join(tmp, "runs", f.name))); err != nil {
			return err
		}
		if err := fix.rewrite(dir); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if err := deriveFolder(root, dir, f.name == "signed", signKey); err != nil {
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
	if fix.commit, err = commitRoot(root); err != nil {
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
		fmt.Fprintf(log, "== fixture: %s cut to %d bytes\n", filepath.Base(p), len(cut))
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
// again, in a copy committed as TestMain commits it.
func deriveAll(out, key string) error {
	tmp, err := os.MkdirTemp("", "audit-fixture-regen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if err := os.CopyFS(root, os.DirFS(out)); err != nil {
		return err
	}
	if _, err := commitRoot(root); err != nil {
		return err
	}
	for _, f := range fixtureFolders {
		if err := deriveFolder(root, filepath.Join(root, f.name), f.name == "signed", key); err != nil {
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

// deriveFolder has the audit write its derived files into dir, as the
// runner had it do (signed, for a signed folder); unlike a story's derive,
// the folder must pass.
func deriveFolder(root, dir string, signed bool, key string) error {
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
func runRunner(ctx context.Context, checkout, dir string, f fixtureFolder, tries int, log io.Writer) error {
	var err error
	for try := 1; try <= tries; try++ {
		if err = os.RemoveAll(dir); err != nil {
			return err
		}
		o := runner.Options{Root: checkout, Out: dir, Stores: protocol.Stores, PostgresAsked: true, Seed: 1,
			Intents: runner.DefaultIntents, Retries: retries.Default, Stdout: log, Stderr: log}
		f.opts(&o)
		fmt.Fprintf(log, "== fixture: %s (try %d of %d)\n", f.name, try, tries)
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
	readme := "# Stand-in for targets/" + filepath.Base(from) + "\n\nWritten by cmd/audit's TestRegenerateFixture: the audit reads this\nfolder's target.json and lock file and digests it; it never runs the\ntarget, so the program is not here (see ../../README.md).\n"
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
// (written by cmd/audit's TestRegenerateFixture): audit -rebuild builds
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
		"// (written by cmd/audit's TestRegenerateFixture; the audit reads them\n" +
		"// with go/parser). See ../../README.md.\n" +
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
// byte through evidence.Manifest (a format this file no longer knows).
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
		return fmt.Errorf("%s: does not round-trip through evidence.Manifest (%v): update cmd/audit/fixture_regen_test.go", name, err)
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
// root's, never its .git; anything else (README.md, keys/) is kept.
func replaceFixture(root, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	entries := slices.Clone(rootPaths)
	for _, f := range fixtureFolders {
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

// Ensure the fixture's constants file is gofmt'd Go that declares every
// protocol constant the manifest records, each with the lab's value as the
// Go type checker evaluates it (the audit reads them with go/parser).
func TestProtocolFile(t *testing.T) {
	src := protocolFile()
	if got, err := format.Source(src); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("protocolFile() is not gofmt'd Go (%v):\n%s", err, src)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "protocol.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("protocol", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want constant.Value
	}{
		{"EffectPath", constant.MakeString(protocol.EffectPath)},
		{"KeyHeader", constant.MakeString(protocol.KeyHeader)},
		{"ReplayedHeader", constant.MakeString(protocol.ReplayedHeader)},
		{"FaultHeader", constant.MakeString(protocol.FaultHeader)},
		{"KeyPattern", constant.MakeString(protocol.KeyPattern)},
		{"DefaultBody", constant.MakeString(protocol.DefaultBody)},
		{"DefaultCapacity", constant.MakeInt64(protocol.DefaultCapacity)},
		{"DefaultMaxBody", constant.MakeInt64(protocol.DefaultMaxBody)},
		{"DefaultWait", constant.MakeInt64(int64(protocol.DefaultWait))},
		{"SlowDelay", constant.MakeInt64(int64(protocol.SlowDelay))},
		{"CrashExitCode", constant.MakeInt64(protocol.CrashExitCode)},
		{"DefaultClientTimeout", constant.MakeInt64(int64(protocol.DefaultClientTimeout))},
	} {
		obj, ok := pkg.Scope().Lookup(c.name).(*types.Const)
		if !ok {
			t.Errorf("protocolFile() declares no constant %s", c.name)
			continue
		}
		if got := obj.Val(); !constant.Compare(got, token.EQL, c.want) {
			t.Errorf("%s = %s, want %s", c.name, got, c.want)
		}
	}
}

// Ensure the root's commit depends on its files alone: the same files in
// another folder commit to the same hash, one changed byte to another.
func TestCommitRoot(t *testing.T) {
	write := func(files map[string]string) string {
		root := t.TempDir()
		for name, data := range files {
			if err := writeFile(filepath.Join(root, filepath.FromSlash(name)), []byte(data)); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	files := map[string]string{"go.mod": "module idemlab\n", "go.sum": "", "cases/10-a.json": "{}\n", "schema/a.schema.json": "{}\n",
		"internal/protocol/protocol.go": string(protocolFile()), "cmd/effectserver/main.go": standInServer,
		"targets/a/target.json": "{}\n"}
	a, err := commitRoot(write(files))
	if err != nil {
		t.Fatal(err)
	}
	b, err := commitRoot(write(files))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("the same files committed to %s and %s", a, b)
	}
	files["cases/10-a.json"] = "{} \n"
	if c, err := commitRoot(write(files)); err != nil || c == a {
		t.Errorf("a changed case file committed to %s (%v), the same as before", c, err)
	}
}

// Ensure a target's stand-in holds its target.json and lock file, byte
// for byte, and a README, never its program.
func TestWriteTarget(t *testing.T) {
	from, to := t.TempDir(), filepath.Join(t.TempDir(), "t")
	for name, data := range map[string]string{"target.json": "{}\n", "package-lock.json": "{\"lock\": 1}\n", "app.js": "x\n", "node_modules/m/index.js": "y\n"} {
		if err := writeFile(filepath.Join(from, filepath.FromSlash(name)), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeTarget(from, to); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(to, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(to, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	})
	if want := "README.md package-lock.json target.json"; strings.Join(got, " ") != want {
		t.Errorf("wrote %v, want %s", got, want)
	}
	for _, name := range []string{"target.json", "package-lock.json"} {
		a, _ := os.ReadFile(filepath.Join(from, name))
		b, _ := os.ReadFile(filepath.Join(to, name))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: %q, want the target's %q", name, b, a)
		}
	}
}

// Ensure a cut is gapless only when its intents are 0..n-1.
func TestGapless(t *testing.T) {
	for _, c := range []struct {
		history string
		want    bool
	}{
		{`{"kind":"run"}` + "\n" + `{"kind":"attempt","intent":0}` + "\n" + `{"kind":"attempt","intent":1}` + "\n", true},
		{`{"kind":"attempt","intent":0}` + "\n" + `{"kind":"attempt","intent":2}` + "\n", false},
		{`{"kind":"run"}` + "\n", false},
	} {
		if got := gapless([]byte(c.history)); got != c.want {
			t.Errorf("gapless(%q) = %v, want %v", c.history, got, c.want)
		}
	}
}

// Ensure the runner knows every file the audit derives: it may write a
// folder again only where it holds nothing else (runner -out evidence
// refused a folder holding MATRIX.md when the audit first derived it). The
// committed fixture holds the audit's renderings of a selection with
// stores, targets and experiments.
func TestRunnerKnowsDerivedFiles(t *testing.T) {
	dir := filepath.Join(fixtureDir, "evidence")
	b, err := os.ReadFile(filepath.Join(dir, evidence.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Files map[string]string `json:"files"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if _, listed := m.Files[name]; listed || name == evidence.ManifestName || e.IsDir() {
			continue
		}
		if !slices.Contains(evidence.DerivedNames, name) && !evidence.DerivedPattern.MatchString(name) {
			t.Errorf("the audit derives %s, which evidence.DerivedNames does not name: the runner would refuse to write the folder again", name)
		}
	}
}

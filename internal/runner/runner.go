// Package runner is the runner's one job: load the cases, build the lab's
// programs, run every (case, store) pair in parallel, the cases on targets
// and the experiments, write what they observed (package evidence), and
// hand the folder to the audit program, a separate process, which judges
// it and writes its verdicts and renderings beside it.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"idemlab/internal/audit/dsse"
	"idemlab/internal/audit/shard"
	"idemlab/internal/audit/strict"
	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/evidence"
	"idemlab/internal/labbuild"
	"idemlab/internal/pgcluster"
	"idemlab/internal/protocol"
	"idemlab/internal/retries"
	"idemlab/internal/safefile"
	"idemlab/internal/serverproc"
	"idemlab/internal/target"
)

// Options is one invocation of the runner.
type Options struct {
	Root        string             // the checkout: cases/, schema/, sources
	Out         string             // the evidence folder to write; "" writes a fresh one under out/ and compares it with the committed evidence
	Stores      []protocol.Store   // stores to run, in evidence order
	Case        string             // run only this case, and no experiment
	Experiment  Experiment         // run only this experiment, and no case; None: cases only
	Seed        uint64             // the retries and chaos experiments' seed
	Intents     int                // the retries experiment's intents per row (at least 1)
	Retries     retries.Parameters // the retries experiment's other knobs (zero: retries.Default); Intents overrides its Intents
	Unsafe      protocol.Flaw      // run the cases on servers with this flaw, and no experiment
	ServerPath  string             // a prebuilt effectserver; empty builds cmd/effectserver
	Protocol    *caserun.Protocol  // nil runs with caserun.DefaultProtocol
	Chaos       ChaosOptions       // the chaos experiment's knobs
	PostgresDSN string             // run the postgres store on this server, not a throwaway cluster
	// PostgresAsked: the caller named the postgres store (-store postgres),
	// so a machine without PostgreSQL is an error, not a skipped column.
	PostgresAsked bool
	StoresGiven   bool // -store narrowed the stores: a plain run then runs no shipped target
	// Targets are -target's (a shipped target's name or a folder); empty:
	// every shipped target. With Targets the cases run on no store unless
	// StoresGiven.
	Targets []string
	SignKey string // an ed25519 private key file: the audit then signs its statement (audit -sign)
	JUnit   string // once the audit passes, it writes its verdicts as a JUnit XML report here (audit -junit)
	Strict  bool   // a limitation fails the gate (-target) and the JUnit report too (audit -strict)
	// Trials is how many times each case runs on each target, each on
	// fresh state (0: once); at most MaxTrials.
	Trials int
	// Shard is the slice of the run's cells this invocation runs (-shard
	// K/N): the cases only, no experiment; its folder audits as a slice,
	// and audit -merge joins the slices. Zero: the whole run.
	Shard  shard.Slice
	Stdout io.Writer
	Stderr io.Writer
}

// DefaultIntents is the retries experiment's intents per row unless told.
var DefaultIntents = retries.Default.Intents

// DefaultTrials is -trials' default: the runs of each case on each target
// in a run that does not say (the committed evidence says 10), and
// MaxTrials its bound.
const (
	DefaultTrials = 3
	MaxTrials     = 50
)

// MaxTargetRuns bounds the runs on targets of one invocation, trials ×
// targets × cases (a case that cannot run counted too): about 6 KB each in
// targets.json, the audit's cap on it (audit.CapTargets) holds them.
const MaxTargetRuns = 6000

// trials is how many times each case runs on each target.
func (o Options) trials() int { return max(o.Trials, 1) }

// plan says what one invocation runs: the case suite unless -experiment
// names one experiment, and every experiment unless -case, -unsafe-registry
// or -experiment narrows the run.
func (o Options) plan() (suite bool, run []Experiment) {
	switch {
	case o.Experiment == None, !o.Shard.Whole():
		return true, nil
	case o.Experiment != "":
		return false, []Experiment{o.Experiment}
	case o.Case != "", o.Unsafe != protocol.Sound, len(o.Targets) > 0:
		return true, nil
	default:
		return true, Experiments()
	}
}

// check refuses an unknown experiment, a bad count, the knobs of an
// experiment this invocation runs and flags that exclude each other,
// before anything is built or run.
func (o Options) check() error {
	if o.Experiment != "" {
		if _, err := ParseExperiment(string(o.Experiment)); err != nil {
			return &UsageError{fmt.Errorf("-experiment: %w", err)}
		}
	}
	if o.Intents < 1 {
		return &UsageError{fmt.Errorf("-intents %d: want a positive count", o.Intents)}
	}
	if o.Trials < 0 || o.Trials > MaxTrials {
		return &UsageError{fmt.Errorf("-trials %d: outside 1..%d", o.Trials, MaxTrials)}
	}
	if o.Chaos.Trials < 0 || o.Chaos.Trials > MaxChaosTrials {
		return &UsageError{fmt.Errorf("-chaos-trials %d: outside 1..%d", o.Chaos.Trials, MaxChaosTrials)}
	}
	if len(o.Stores) == 0 {
		return &UsageError{errors.New("no store to run on")}
	}
	oneExperiment := o.Experiment != "" && o.Experiment != None
	if oneExperiment && o.Case != "" {
		return &UsageError{errors.New("-case and -experiment exclude each other: a run is either cases or one experiment")}
	}
	_, run := o.plan()
	for _, name := range run {
		if e, _ := lookupExperiment(name); e.check != nil {
			if err := e.check(o); err != nil {
				return &UsageError{fmt.Errorf("%s experiment: %w", name, err)}
			}
		}
	}
	if err := o.Shard.Check(); err != nil {
		return &UsageError{fmt.Errorf("-shard %w", err)}
	}
	if !o.Shard.Whole() && oneExperiment {
		return &UsageError{errors.New("-shard and -experiment exclude each other: a slice runs cases, the experiments run whole")}
	}
	if !o.Shard.Whole() && (o.JUnit != "" || o.Strict || o.SignKey != "") {
		return &UsageError{errors.New("-shard: a slice is judged once the slices are merged: pass -junit, -strict and -sign to audit -merge")}
	}
	if o.Strict && len(o.Targets) == 0 && o.JUnit == "" {
		return &UsageError{errors.New("-strict goes with -target or -junit: it makes a limitation fail the gate and the report")}
	}
	if o.JUnit != "" && o.Out != "" && checkoutDir(o.Out, o.JUnit) != "" {
		return &UsageError{fmt.Errorf("-junit %s: inside the evidence folder -out %s, which holds only what the runner and the audit write", o.JUnit, o.Out)}
	}
	if o.PostgresDSN != "" {
		if err := pgcluster.CheckDSN(o.PostgresDSN); err != nil {
			return &UsageError{fmt.Errorf("-pg-dsn: %w", err)}
		}
	}
	if o.Unsafe == protocol.Sound {
		return nil
	}
	if _, err := protocol.ParseFlaw(string(o.Unsafe)); err != nil {
		return &UsageError{fmt.Errorf("-unsafe-registry: %w", err)}
	}
	if oneExperiment {
		return &UsageError{errors.New("-unsafe-registry and -experiment exclude each other: a mutation run runs the cases")}
	}
	return nil
}

// UsageError is bad input from the caller: flags, case files, the -out
// folder. Its text is the underlying error's, which names the bad input.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// parallel bounds the (case, store) runs at once: they mostly wait on fsync,
// sleeps and process starts, so more than the core count pays off.
const parallel = 16

// What Run returns besides a *UsageError or a broken lab's error.
var (
	// ErrAuditFailed: the evidence was written and the audit rejected it.
	ErrAuditFailed = errors.New("audit failed")
	// ErrViolations: the audit passed, and a judged run on a -target
	// shows a safety violation (with Strict, a limitation too).
	ErrViolations = errors.New("a judged run on a target fails the gate")
	// ErrDiffers: the run passed its audit, but a deterministic file differs
	// from the committed evidence: the sources no longer make the evidence
	// that is committed, or a result stopped being deterministic.
	ErrDiffers = errors.New("a deterministic file differs from the committed evidence")
	// ErrInterrupted: cancelled (SIGINT or SIGTERM) before the evidence was
	// written; every server and database the run started is gone.
	ErrInterrupted = errors.New("interrupted: stopped sending, stopped every server and database, wrote no evidence")
	// ErrAuditInterrupted: cancelled while the audit ran, the evidence
	// written but not audited. It does not wrap ErrInterrupted, whose
	// words (no evidence) would be false.
	ErrAuditInterrupted = errors.New("interrupted while auditing")
	// ErrNoPostgres: -store postgres on a machine without PostgreSQL.
	ErrNoPostgres = errors.New("the postgres store needs PostgreSQL's server programs: " + pgcluster.Hint + " (apt-get install -y postgresql), or run -store volatile or -store durable")
)

// MaxServerBytes bounds the -server binary the runner reads and hashes.
const MaxServerBytes = 512 << 20

// ParseStores turns the -store flag (a store's name, or "all") into stores.
func ParseStores(flag string) ([]protocol.Store, error) {
	if flag == "all" {
		return slices.Clone(protocol.Stores), nil
	}
	s, err := protocol.ParseStore(flag)
	if err != nil {
		return nil, &UsageError{fmt.Errorf("%w, or all", err)}
	}
	return []protocol.Store{s}, nil
}

// evidenceNames are the files the runner (and after it the audit) may
// write into the evidence folder, and the patterns of those whose names
// depend on the run.
func evidenceNames() ([]string, []*regexp.Regexp) {
	names := append([]string{evidence.ResultsName, evidence.RunName, evidence.ManifestName, evidence.TargetsName}, evidence.DerivedNames...)
	patterns := []*regexp.Regexp{evidence.DerivedPattern}
	for _, e := range experiments {
		names, patterns = append(names, e.files...), append(patterns, e.patterns...)
	}
	return names, patterns
}

// onTargets says whether the cases and chaos run on targets: on -target's,
// or on every shipped one unless -store narrowed the run; never in a
// mutation run (the broken registries are the lab server's).
func (o Options) onTargets() bool {
	return o.Unsafe == protocol.Sound && (len(o.Targets) > 0 || !o.StoresGiven)
}

// onStores says whether the cases and chaos run on the lab's own stores:
// unless -target alone narrowed the run.
func (o Options) onStores() bool { return len(o.Targets) == 0 || o.StoresGiven }

// CommittedEvidence is the checkout's committed evidence folder, and
// FreshOut the folder under which a run without -out writes its own.
const (
	CommittedEvidence = "evidence"
	FreshOut          = "out"
)

// Run runs the suite and returns nil when the audit passed, ErrAuditFailed
// when it did not, a *UsageError for bad input, ErrInterrupted when ctx
// ended first, a *TargetError (maybe joined with the audit's verdict) when
// a target could not be set up, started or reached or a target named with
// -target could not run here, and any other error when the lab itself
// broke.
func Run(ctx context.Context, o Options) (err error) {
	if err := o.check(); err != nil {
		return err
	}
	o.Stdout, o.Stderr = lockOutput(o.Stdout, o.Stderr) // the background's lines and the run's
	inv := &invocation{Options: o}
	inv.suite, inv.experiments = o.plan()
	if err := inv.freshOut(); err != nil {
		return err
	}
	defer func() { err = inv.sayInterrupted(ctx, err) }()
	defer inv.close()
	for _, step := range []func(context.Context) error{
		inv.load, inv.start, inv.ready, inv.runCases, inv.casesOnTargets, inv.runExperiments, inv.write, inv.judge,
	} {
		if err := step(ctx); err != nil {
			return errors.Join(append(inv.skips, err)...)
		}
	}
	// A target named with -target that was skipped: not a pass, whatever
	// the audit said of the rest (nil: joins to nil).
	return errors.Join(inv.skips...)
}

// An invocation is one Run as it goes: Run's steps fill it in, in order.
type invocation struct {
	Options
	suite       bool         // the case suite runs
	experiments []Experiment // the experiments that run, in run order
	compareWith string       // the committed evidence a run without -out is compared with

	schemas  *strict.Schemas
	cases    []casefile.Case
	loaded   []*target.Target // every target the cases or chaos run on
	targets  []*target.Target // the targets the cases run on: loaded, in a suite run
	tmp      string           // this runner's temp folder
	cleanups []func()         // close runs them, last first

	waitServer, waitAudit later[labbuild.Binary]
	pg                    postgresServer // nil: no PostgreSQL
	setups                setups
	server                labbuild.Binary
	cfg                   caserun.Config

	in        evidence.ManifestInput
	files     []evidence.File
	written   bool // the evidence folder was written
	selection evidence.Selection
	skips     []error // a *TargetError per target named with -target that was skipped (skippedNamed)
}

// freshOut picks the folder a run without -out writes, under out/, to be
// compared with the committed evidence at the end.
func (inv *invocation) freshOut() error {
	if inv.Out != "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(inv.Root, FreshOut), 0o755); err != nil {
		return &UsageError{fmt.Errorf("make %s: %w", FreshOut, err)}
	}
	inv.Out = filepath.Join(inv.Root, FreshOut, "run-"+time.Now().UTC().Format("20060102-150405.000"))
	inv.compareWith = filepath.Join(inv.Root, CommittedEvidence)
	return nil
}

// sayInterrupted is the error of a run whose ctx ended: what is true of
// its evidence folder, written but not audited, or not written at all.
func (inv *invocation) sayInterrupted(ctx context.Context, err error) error {
	switch {
	case err == nil || errors.Is(err, ErrAuditInterrupted) || ctx.Err() == nil:
		return err
	case inv.written:
		return inv.notAudited()
	default:
		return ErrInterrupted
	}
}

func (inv *invocation) notAudited() error {
	return fmt.Errorf("%w: %s was written but not audited (run audit on it, or run again)", ErrAuditInterrupted, inv.Out)
}

// close stops and removes what the run started, last first.
func (inv *invocation) close() {
	for _, f := range slices.Backward(inv.cleanups) {
		f()
	}
}

// load reads and checks every input before anything starts: the schemas,
// the cases, the evidence folder, the -sign key and the targets.
func (inv *invocation) load(context.Context) error {
	schemas, err := strict.LoadSchemas(filepath.Join(inv.Root, "schema"))
	if err != nil {
		return &UsageError{fmt.Errorf("%w (run the runner from the idemlab checkout)", err)}
	}
	inv.schemas = schemas
	if inv.suite {
		if inv.cases, err = loadCases(inv.Options, schemas); err != nil {
			return err
		}
	}
	if err := evidence.CheckOutsideSources(inv.Root, inv.Out); err != nil {
		return &UsageError{err}
	}
	if err := checkSignKey(inv.SignKey); err != nil {
		return err
	}
	if inv.onTargets() && (inv.suite || slices.Contains(inv.experiments, Chaos)) {
		dirs, err := findTargets(inv.Options)
		if err != nil {
			return err
		}
		if inv.loaded, err = loadTargets(dirs, schemas); err != nil {
			return err
		}
	}
	if inv.suite {
		inv.targets = inv.loaded
	}
	if runs := inv.trials() * len(inv.targets) * len(inv.cases); runs > MaxTargetRuns {
		return &UsageError{fmt.Errorf("-trials %d: %d trials × %d targets × %d cases are %d runs on targets, at most %d (what targets.json may hold for its audit)",
			inv.trials(), inv.trials(), len(inv.targets), len(inv.cases), runs, MaxTargetRuns)}
	}
	names, patterns := evidenceNames()
	if err := evidence.CheckTarget(inv.Out, names, patterns...); err != nil {
		return &UsageError{err}
	}
	if inv.compareWith != "" && !inv.Shard.Whole() {
		fmt.Fprintf(inv.Stdout, "\nnot compared with %s: this folder is slice %s of a run\n", inv.compareWith, inv.Shard)
	} else if inv.compareWith != "" {
		fmt.Fprintf(inv.Stdout, "writing %s (git-ignored; -out %s regenerates the committed evidence)\n", inv.Out, CommittedEvidence)
	}
	return nil
}

// loadCases loads the case files, narrowed to -case's and, in a mutation
// run, to those a mutant can run; too many calls in all is refused.
func loadCases(o Options, schemas *strict.Schemas) ([]casefile.Case, error) {
	cases, err := casefile.LoadDir(filepath.Join(o.Root, "cases"), schemas)
	if err == nil {
		cases, err = selectCase(cases, o.Case)
	}
	if err == nil {
		err = casefile.CheckSuite(cases, len(o.Stores))
	}
	if err != nil {
		return nil, &UsageError{err}
	}
	if o.Unsafe != protocol.Sound {
		if cases = mutable(cases, o.Stdout); len(cases) == 0 {
			return nil, &UsageError{fmt.Errorf("-unsafe-registry %s: no selected case runs on the key registry (the downstream mode and key expiry refuse a mutant)", o.Unsafe)}
		}
	}
	return cases, nil
}

// checkSignKey refuses a -sign key the audit could not read now: the
// audit signs only at the end.
func checkSignKey(path string) error {
	if path == "" {
		return nil
	}
	data, err := safefile.Read(path, dsse.MaxKeyFile)
	if err == nil {
		_, err = dsse.ParsePrivateKey(data)
	}
	if err != nil {
		return &UsageError{fmt.Errorf("-sign %s: %w", path, err)}
	}
	return nil
}

// start makes this runner's temp folder, starts the lab's builds (the
// server's first) and the targets' setups in the background, since on a
// cold machine they take longer than the cases (docs/commands.md), and
// PostgreSQL where a store or a target needs it.
func (inv *invocation) start(ctx context.Context) error {
	// The watchdog ends what the run started if the runner dies first
	// (SIGKILL): the kernel's parent-death signal reaches only a direct
	// child. Closed last, once everything else stopped.
	wd, err := serverproc.StartWatchdog()
	if err != nil {
		return err
	}
	inv.cleanups = append(inv.cleanups, func() {
		if err := wd.Close(); err != nil {
			fmt.Fprintln(inv.Stderr, "runner:", err)
		}
	})
	if base := serverproc.Cgroups(); base != "" {
		fmt.Fprintf(inv.Stdout, "processes: each started in a cgroup of its own below %s, killed with it\n", base)
	} else {
		fmt.Fprintln(inv.Stdout, "processes: no cgroup of their own here (none this runner may make): one that leaves its process group and clears its environment may outlive the run (docs/bounds.md)")
	}
	tmp, swept, release, err := makeTemp(os.TempDir())
	if len(swept) > 0 {
		fmt.Fprintf(inv.Stdout, "removed %d temp folders of runners that are gone: %s\n", len(swept), strings.Join(swept, ", "))
	}
	if err != nil {
		return err
	}
	inv.tmp = tmp
	bg := newBackground(ctx)
	inv.cleanups = append(inv.cleanups, release, bg.stop)
	if err := inv.startBuilds(ctx, bg); err != nil {
		return err
	}
	if inv.needsPostgres() {
		pg, err := startPostgres(ctx, &inv.Options, tmp)
		if err != nil {
			return err
		}
		if pg != nil {
			inv.pg = pg
			inv.cleanups = append(inv.cleanups, func() { pg.Stop() })
		}
	}
	inv.setups, err = startSetups(bg, inv.loaded, inv.pg != nil, inv.Stdout)
	return err
}

// startBuilds starts building the server, then the audit.
func (inv *invocation) startBuilds(ctx context.Context, bg *background) error {
	o := inv.Options // the builds' own copy: startPostgres may change Stores
	if o.ServerPath != "" {
		server, err := serverBinary(ctx, o)
		if err != nil {
			return err
		}
		inv.waitServer = func(context.Context) (labbuild.Binary, error) { return server, nil }
	} else {
		inv.waitServer = start(bg, func(ctx context.Context) (labbuild.Binary, error) { return serverBinary(ctx, o) })
	}
	waitServer := inv.waitServer
	inv.waitAudit = start(bg, func(ctx context.Context) (labbuild.Binary, error) {
		if _, err := waitServer(ctx); err != nil {
			return labbuild.Binary{}, err
		}
		return build(ctx, o, "./cmd/audit", "")
	})
	return nil
}

// needsPostgres says whether the run needs PostgreSQL: for the postgres
// store's cases or chaos, or for a target's postgres service.
func (inv *invocation) needsPostgres() bool {
	store := slices.Contains(inv.Stores, protocol.Postgres) && inv.onStores() && (inv.suite || slices.Contains(inv.experiments, Chaos))
	return store || slices.ContainsFunc(inv.loaded, func(t *target.Target) bool { return slices.Contains(t.Services, target.Postgres) })
}

// ready waits for the server and the setups (no npm shares the machine with
// a measured run) and fixes how the cases run and what the manifest says.
func (inv *invocation) ready(ctx context.Context) error {
	var err error
	if inv.server, err = inv.waitServer(ctx); err != nil {
		return err
	}
	if err := inv.setups.waitAll(ctx, inv.loaded); err != nil {
		return err
	}
	inv.cfg = caserun.Config{ServerPath: inv.server.Path, StateRoot: inv.tmp, Protocol: caserun.DefaultProtocol, UnsafeRegistry: inv.Unsafe, Databases: inv.pg}
	if inv.Protocol != nil {
		inv.cfg.Protocol = *inv.Protocol
	}
	inv.in = evidence.ManifestInput{Root: inv.Root, Git: evidence.GitState(inv.Root), Protocol: inv.cfg.Protocol, ServerSHA: inv.server.SHA256,
		ServerBuild: inv.server.Recipe, Unsafe: inv.Unsafe, Flags: inv.RecordedFlags(inv.experiments, len(inv.targets) > 0, len(inv.loaded) > 0), Shard: inv.Shard}
	return nil
}

// runCases runs the case suite on the stores, into results.json and run.json.
func (inv *invocation) runCases(ctx context.Context) error {
	if !inv.suite || !inv.onStores() {
		return nil
	}
	began := time.Now()
	runs, err := runAll(ctx, inv.cfg, storeRuns(inv.cases, inv.Stores, inv.Shard), inv.Stdout)
	if err != nil {
		return err
	}
	wall := time.Since(began)
	fmt.Fprintf(inv.Stdout, "%d runs in %s\n", len(runs), wall.Round(time.Millisecond))
	files, err := evidence.RunFiles(runs, evidence.Timing{Began: began, Wall: wall, Parallel: parallel})
	if err != nil {
		return err
	}
	inv.files = append(inv.files, files...)
	inv.in.Cases, inv.in.Stores = caseNames(inv.cases), inv.Stores
	// The manifest's PostgreSQL version is the postgres column's.
	if inv.pg != nil && slices.Contains(inv.Stores, protocol.Postgres) {
		inv.in.Postgres = inv.pg.ServerVersion()
	}
	return nil
}

func caseNames(cases []casefile.Case) []string {
	var names []string
	for _, c := range cases {
		names = append(names, c.Name)
	}
	return names
}

// runExperiments runs the selected experiments, in order.
func (inv *invocation) runExperiments(ctx context.Context) error {
	for _, name := range inv.experiments {
		e, _ := lookupExperiment(name) // checked by plan
		files, err := e.run(ctx, inv)
		if err != nil {
			return err
		}
		inv.files = append(inv.files, files...)
		inv.in.Experiments = append(inv.in.Experiments, string(name))
	}
	return nil
}

// write writes the evidence folder, the manifest last, unless ctx ended.
func (inv *invocation) write(ctx context.Context) error {
	m, err := evidence.NewManifest(inv.in)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := evidence.Write(inv.Out, inv.schemas, inv.files, m); err != nil {
		return err
	}
	inv.written, inv.selection = true, m.Selection
	fmt.Fprintf(inv.Stdout, "\nwrote %s\n\n", inv.Out)
	return nil
}

// judge has the audit judge the evidence and compare a fresh run's.
func (inv *invocation) judge(ctx context.Context) error {
	bin, err := inv.waitAudit(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return err // said by sayInterrupted: written, not audited
		}
		return fmt.Errorf("%s was written but not audited: %w", inv.Out, err)
	}
	verdict := inv.audit(ctx, bin.Path)
	if verdict != nil && !errors.Is(verdict, ErrViolations) {
		return verdict
	}
	if inv.compareWith != "" {
		if err := inv.compareCommitted(ctx, bin.Path); err != nil {
			return err
		}
	}
	return verdict
}

// compareCommitted compares a fresh run with the committed evidence, with
// the audit's -compare, when both made the same selection: the
// deterministic files must be identical, the others differ as expected,
// and the audit sets the rates on targets side by side (never a failure).
func (inv *invocation) compareCommitted(ctx context.Context, bin string) error {
	committed := inv.compareWith
	b, err := os.ReadFile(filepath.Join(committed, evidence.ManifestName))
	if err != nil {
		fmt.Fprintf(inv.Stdout, "\nnot compared with %s: %v\n", committed, err)
		return nil
	}
	var m struct {
		Selection evidence.Selection `json:"selection"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("compare with %s: %w", committed, err)
	}
	if !sameSelection(m.Selection, inv.selection) {
		fmt.Fprintf(inv.Stdout, "\nnot compared with %s: it selects %s; this run selected %s\n", committed, describeSelection(m.Selection), describeSelection(inv.selection))
		return nil
	}
	fmt.Fprintf(inv.Stdout, "\ncompared with the committed %s:\n", committed)
	return inv.runAudit(ctx, bin, ErrDiffers, "-compare", committed, inv.Out)
}

func sameSelection(a, b evidence.Selection) bool {
	return slices.Equal(a.Cases, b.Cases) && slices.Equal(a.Stores, b.Stores) && slices.Equal(a.Targets, b.Targets) && slices.Equal(a.Experiments, b.Experiments)
}

// describeSelection is a selection in a few words.
func describeSelection(s evidence.Selection) string {
	return fmt.Sprintf("%d cases on stores [%s] and targets [%s], experiments [%s]", len(s.Cases),
		strings.Join(s.Stores, " "), strings.Join(s.Targets, " "), strings.Join(s.Experiments, " "))
}

// postgresServer is what the postgres column runs on: a throwaway cluster
// the runner started, or an existing server (-pg-dsn).
type postgresServer interface {
	caserun.Databases
	Stop() error
	ServerVersion() string
}

// startPostgres starts the throwaway PostgreSQL the postgres column runs
// on, or attaches to -pg-dsn's server (its password, if any, in a file in
// the temp folder tmp: the DSNs of the runs hold none), saying which.
// Without PostgreSQL it drops the postgres store from o.Stores, says so
// and returns nil, unless the caller asked for that store (ErrNoPostgres).
func startPostgres(ctx context.Context, o *Options, tmp string) (postgresServer, error) {
	if o.PostgresDSN != "" {
		e, err := pgcluster.Attach(ctx, o.PostgresDSN, tmp)
		if err != nil {
			return nil, &UsageError{fmt.Errorf("-pg-dsn: %w", err)}
		}
		fmt.Fprintf(o.Stdout, "postgres %s: the server -pg-dsn names, one database per run\n", e.Version)
		if len(e.Swept) > 0 {
			fmt.Fprintf(o.Stdout, "postgres: dropped %d databases of runners that are gone: %s\n", len(e.Swept), strings.Join(e.Swept, ", "))
		}
		for _, err := range e.SweepFailed {
			fmt.Fprintf(o.Stderr, "runner: warning: %v\n", err)
		}
		return e, nil
	}
	pg, err := pgcluster.Start(ctx, pgcluster.Options{})
	switch {
	case errors.Is(err, pgcluster.ErrNotInstalled) && !o.PostgresAsked:
		o.Stores = slices.DeleteFunc(slices.Clone(o.Stores), func(s protocol.Store) bool { return s == protocol.Postgres })
		fmt.Fprintf(o.Stdout, "postgres column skipped: PostgreSQL is not installed (%s; apt-get install -y postgresql)\n", pgcluster.Hint)
		return nil, nil
	case errors.Is(err, pgcluster.ErrNotInstalled):
		return nil, fmt.Errorf("%w: %v", ErrNoPostgres, err)
	case err != nil:
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	initdb := "initdb"
	if pg.InitCopied {
		initdb = "initdb's kept output copied"
	}
	fmt.Fprintf(o.Stdout, "postgres %s: a throwaway cluster in %s (%s %s, start %s), one database per run\n",
		pg.Version, pg.Dir, initdb, pg.InitIn.Round(time.Millisecond), pg.ReadyIn.Round(time.Millisecond))
	return pg, nil
}

// mutable keeps the cases a mutation run can run, saying what it left out:
// the server refuses a mutant of its key registry together with the
// downstream mode (whose claims live in the store) or key expiry.
func mutable(cases []casefile.Case, out io.Writer) []casefile.Case {
	var left []string
	var run []casefile.Case
	for _, c := range cases {
		if c.Ledger != nil || c.Server.KeyTTLMS > 0 {
			left = append(left, c.Name)
		} else {
			run = append(run, c)
		}
	}
	if len(left) > 0 {
		fmt.Fprintf(out, "mutation run: %d cases run on the key registry; left out (downstream mode or key expiry, which refuse a mutant): %s\n", len(run), strings.Join(left, ", "))
	}
	return run
}

// selectCase narrows cases to -case's: one case file's name, or several
// separated by commas, run in case-file order; each named once.
func selectCase(cases []casefile.Case, list string) ([]casefile.Case, error) {
	if list == "" {
		return cases, nil
	}
	names, wanted := caseNames(cases), strings.Split(list, ",")
	for i, w := range wanted {
		switch {
		case !slices.Contains(names, w):
			return nil, fmt.Errorf("-case %q: no such case; cases are: %s", w, strings.Join(names, ", "))
		case slices.Contains(wanted[:i], w):
			return nil, fmt.Errorf("-case %q: named twice", w)
		}
	}
	return slices.DeleteFunc(slices.Clone(cases), func(c casefile.Case) bool { return !slices.Contains(wanted, c.Name) }), nil
}

// storeRuns are the (case, store) runs to make, in evidence order: every
// case on every store that slice holds (all of them in a whole run).
func storeRuns(cases []casefile.Case, stores []protocol.Store, slice shard.Slice) []evidence.Run {
	var out []evidence.Run
	for _, c := range cases {
		for _, st := range stores {
			if slice.HoldsStoreRun(c.Name, string(st)) {
				out = append(out, evidence.Run{Case: c, Store: st})
			}
		}
	}
	return out
}

// runAll runs every (case, store) run, at most parallel at a time, each
// into its own slot, so the order of the evidence never depends on which
// finished first. Whatever a run shows is an observation in its slot (the
// audit judges it); only a broken lab is an error, and it cancels the rest.
func runAll(ctx context.Context, cfg caserun.Config, runs []evidence.Run, progress io.Writer) ([]evidence.Run, error) {
	err := inOrder(ctx, len(runs), parallel, progress, func(ctx context.Context, k int) (string, error) {
		c, store := runs[k].Case, runs[k].Store
		obs, det, err := caserun.Run(ctx, cfg, c, store)
		runs[k] = evidence.Run{Case: c, Store: store, Obs: obs, Detail: det}
		return progressLine(runs[k]), err
	})
	return runs, err
}

// inOrder runs do(0..n-1), at most limit at once, and prints the line each
// returns in index order: a finished one once every one before it was
// printed; an empty line is not printed. An error cancels the rest.
func inOrder(ctx context.Context, n, limit int, out io.Writer, do func(ctx context.Context, i int) (string, error)) error {
	lines := make([]*string, n)
	next := 0 // the first line not yet printed
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(limit)
	for i := range n {
		g.Go(func() error {
			line, err := do(ctx, i)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			lines[i] = &line
			for ; next < n && lines[next] != nil; next++ {
				if *lines[next] != "" {
					fmt.Fprintln(out, *lines[next])
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// build returns the lab's program pkg, built or cached (see labbuild).
func build(ctx context.Context, o Options, pkg, firstNote string) (labbuild.Binary, error) {
	return labbuild.Build(ctx, labbuild.Options{Root: o.Root, Package: pkg, Log: o.Stdout, FirstNote: firstNote})
}

// serverBinary is -server's binary as it is, or cmd/effectserver built.
func serverBinary(ctx context.Context, o Options) (labbuild.Binary, error) {
	const pkg = "./cmd/effectserver"
	if o.ServerPath == "" {
		note := "compiles SQLite, about 30 s on 2 cores"
		if !labbuild.LikeRecipe() {
			note = "compiles SQLite and, as this runner was not built with CGO_ENABLED=0 and -trimpath (the README's command), the standard library again: about 45 s on 2 cores"
		}
		return build(ctx, o, pkg, note)
	}
	path, err := filepath.EvalSymlinks(o.ServerPath)
	if err != nil {
		return labbuild.Binary{}, &UsageError{fmt.Errorf("-server: %w", err)}
	}
	b, err := safefile.Read(path, MaxServerBytes)
	if err != nil {
		return labbuild.Binary{}, &UsageError{fmt.Errorf("-server %s: %w", o.ServerPath, err)}
	}
	return labbuild.Binary{Path: o.ServerPath, SHA256: evidence.SHA256(b), Recipe: labbuild.Prebuilt(pkg)}, nil
}

// progressLine is what a finished run observed, as the runner prints it.
func progressLine(r evidence.Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-29s %-8s effects applied=%-3d", r.Case.Name, r.Store, r.Obs.Counter)
	if r.Obs.LedgerCounter != nil {
		fmt.Fprintf(&b, " ledger=%d", *r.Obs.LedgerCounter)
	}
	fmt.Fprintf(&b, " exits=%v calls=%-3d %6.1fms", r.Obs.ExitCodes, len(r.Obs.Calls), ms(r.Detail.Wall))
	return b.String()
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// audit runs the audit program on the evidence just written, with -write:
// it judges the observations and writes its verdicts and renderings into
// the folder. A run from uncommitted sources is audited with -allow-dirty,
// a mutation run with -allow-mutation (the audit says so in its notes;
// committed evidence, audited without them, needs neither).
func (inv *invocation) audit(ctx context.Context, bin string) error {
	args := []string{"-write"}
	if inv.SignKey != "" {
		args = append(args, "-sign", inv.SignKey)
	}
	if inv.in.Git.Dirty {
		args = append(args, "-allow-dirty")
	}
	if inv.Unsafe != protocol.Sound {
		args = append(args, "-allow-mutation")
	}
	if len(inv.Targets) > 0 && inv.Shard.Whole() {
		args = append(args, "-gate") // the user named the code under test: its verdicts are the run's
	}
	if inv.JUnit != "" {
		args = append(args, "-junit", inv.JUnit)
	}
	if inv.Strict {
		args = append(args, "-strict")
	}
	return inv.runAudit(ctx, bin, ErrAuditFailed, append(args, inv.Out)...)
}

// runAudit runs the audit program with args, its output the runner's, and
// returns failed when what it checked failed (exit status 1).
func (inv *invocation) runAudit(ctx context.Context, bin string, failed error, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, append([]string{"-root", inv.Root}, args...)...)
	cmd.Stdout, cmd.Stderr, cmd.Env = inv.Stdout, inv.Stderr, serverproc.Marked(nil)
	err := cmd.Run()
	exit, exited := errors.AsType[*exec.ExitError](err)
	switch {
	case err == nil:
		return nil
	case exited && exit.ExitCode() == 1:
		return failed
	case exited && exit.ExitCode() == 6:
		return ErrViolations
	case exited && interruptedBy(exit):
		// A Ctrl-C at the terminal reaches the audit too, maybe before
		// the runner's own context says so.
		return inv.notAudited()
	default:
		return fmt.Errorf("run audit %s: %w", args[0], err)
	}
}

// interruptedBy reports whether a process ended by SIGINT or SIGTERM.
func interruptedBy(exit *exec.ExitError) bool {
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGTERM)
}

// Package runner is the runner's one job: load the cases, build the lab's
// programs, run every (case, store) pair in parallel, the cases on targets
// and the experiments, write what they observed (package evidence), and
// hand the folder to the audit program, a separate process, which judges
// it, writes its verdicts and renderings beside it, and passes its verdict
// on.
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
	"idemlab/internal/audit/strict"
	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/evidence"
	"idemlab/internal/labbuild"
	"idemlab/internal/pgcluster"
	"idemlab/internal/protocol"
	"idemlab/internal/retries"
	"idemlab/internal/safefile"
	"idemlab/internal/target"
)

// Options is one invocation of the runner.
type Options struct {
	Root       string             // the checkout: cases/, schema/, sources
	Out        string             // the evidence folder to write; "" writes a fresh one under out/ and compares it with the committed evidence
	Stores     []protocol.Store   // stores to run, in evidence order
	Case       string             // run only this case, and no experiment
	Experiment Experiment         // run only this experiment, and no case; None: cases only
	Seed       uint64             // the retries and chaos experiments' seed
	Intents    int                // the retries experiment's intents per row (at least 1)
	Retries    retries.Parameters // the retries experiment's other knobs (zero: retries.Default); Intents overrides its Intents
	Unsafe     protocol.Flaw      // run the cases on servers with this flaw, and no experiment
	ServerPath string             // a prebuilt effectserver; empty builds cmd/effectserver
	Protocol   *caserun.Protocol  // nil runs with caserun.DefaultProtocol
	// Chaos holds the chaos experiment's knobs.
	Chaos ChaosOptions
	// PostgresDSN, when set, runs the postgres store on this existing
	// server (a database per run, made and dropped there) instead of a
	// throwaway one.
	PostgresDSN string
	// PostgresAsked says the caller named the postgres store itself
	// (-store postgres): without PostgreSQL that is an error, where a
	// plain run skips the postgres column and says so.
	PostgresAsked bool
	// StoresGiven says -store narrowed the stores (a plain run then runs
	// no shipped target).
	StoresGiven bool
	// Targets are the targets to run the cases on (-target: a shipped
	// target's name or a folder); empty in a plain run means every shipped
	// target, and with Targets set the cases run on no store unless
	// StoresGiven.
	Targets []string
	// SignKey, when set, is an ed25519 private key file (OpenSSH without
	// a passphrase, or PKCS #8 PEM): the audit then also writes its
	// statement as a signed DSSE envelope (audit -write -sign).
	SignKey string
	Stdout  io.Writer
	Stderr  io.Writer
}

// DefaultIntents is the retries experiment's intents per row unless told.
var DefaultIntents = retries.Default.Intents

// plan says what one invocation runs: the case suite unless -experiment
// names one experiment, and every experiment unless -case, -unsafe-registry
// or -experiment narrows the run.
func (o Options) plan() (suite bool, run []Experiment) {
	switch {
	case o.Experiment == None:
		return true, nil
	case o.Experiment != "":
		return false, []Experiment{o.Experiment}
	case o.Case != "", o.Unsafe != protocol.Sound, len(o.Targets) > 0:
		return true, nil
	default:
		return true, Experiments()
	}
}

// check refuses an unknown experiment, a bad count and flags that exclude
// each other, before anything is built or run.
func (o Options) check() error {
	if o.Experiment != "" {
		if _, err := ParseExperiment(string(o.Experiment)); err != nil {
			return &UsageError{fmt.Errorf("-experiment: %w", err)}
		}
	}
	if o.Intents < 1 {
		return &UsageError{fmt.Errorf("-intents %d: want a positive count", o.Intents)}
	}
	if len(o.Stores) == 0 {
		return &UsageError{errors.New("no store to run on")}
	}
	oneExperiment := o.Experiment != "" && o.Experiment != None
	if oneExperiment && o.Case != "" {
		return &UsageError{errors.New("-case and -experiment exclude each other: a run is either cases or one experiment")}
	}
	if err := o.checkKnobs(); err != nil {
		return err
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

// checkKnobs refuses the knobs of every experiment this invocation runs.
func (o Options) checkKnobs() error {
	_, run := o.plan()
	for _, name := range run {
		if e, ok := lookupExperiment(name); ok && e.check != nil {
			if err := e.check(o); err != nil {
				return &UsageError{fmt.Errorf("%s experiment: %w", name, err)}
			}
		}
	}
	return nil
}

// UsageError is bad input from the caller: flags, case files, the -out folder.
type UsageError struct{ Err error }

// Error is the underlying error's text, which names the bad input.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// parallel bounds how many (case, store) runs go at once. Runs spend most of
// their time waiting on fsync, sleeps and process starts, not on the CPU, so
// more than the core count pays off; each run has its own server and state.
const parallel = 16

// ErrAuditFailed means the evidence was written and the audit rejected it.
var ErrAuditFailed = errors.New("audit failed")

// ErrInterrupted means the run was cancelled (SIGINT or SIGTERM) before
// the evidence was written: it stopped sending, every server and database
// it started is gone, and it wrote no evidence.
var ErrInterrupted = errors.New("interrupted: stopped sending, stopped every server and database, wrote no evidence")

// ErrAuditInterrupted means the run was cancelled while the audit ran: the
// evidence folder was written but not audited. It does not wrap
// ErrInterrupted, whose words (no evidence) would be false.
var ErrAuditInterrupted = errors.New("interrupted while auditing")

// MaxServerBytes bounds the -server binary the runner reads and hashes.
const MaxServerBytes = 512 << 20

// ParseStores turns the -store flag into the stores to run: one store's
// name, or "all".
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
	names, patterns := experimentFiles()
	names = append(append(names, evidence.ResultsName, evidence.RunName, evidence.ManifestName, evidence.TargetsName), evidence.DerivedNames...)
	return names, append(patterns, evidence.DerivedPattern)
}

// onTargets says whether this invocation runs the cases on targets: with
// -target, or in a run of the cases on every store; never in a mutation
// run (the broken registries are the lab server's).
func (o Options) onTargets(suite bool) bool {
	return suite && o.Unsafe == protocol.Sound && (len(o.Targets) > 0 || !o.StoresGiven)
}

// onStores says whether the cases (and the chaos experiment) run on the
// lab's own stores: unless -target alone narrowed the run to targets.
func (o Options) onStores() bool { return len(o.Targets) == 0 || o.StoresGiven }

// chaosOnTargets says whether the chaos experiment runs on targets: when
// it runs, on the -target ones, or in a run not narrowed by -store on
// every shipped target; never in a mutation run.
func (o Options) chaosOnTargets(run []Experiment) bool {
	return slices.Contains(run, Chaos) && o.Unsafe == protocol.Sound && (len(o.Targets) > 0 || !o.StoresGiven)
}

// CommittedEvidence is the checkout's committed evidence folder, and
// FreshOut the folder under which a run without -out writes its own.
const (
	CommittedEvidence = "evidence"
	FreshOut          = "out"
)

// ErrDiffers means the run passed its audit, but one of its deterministic
// files differs from the committed evidence: the sources no longer make
// the evidence that is committed, or a result stopped being deterministic.
var ErrDiffers = errors.New("a deterministic file differs from the committed evidence")

// Run runs the suite and returns nil when the audit passed, ErrAuditFailed
// when it did not, a *UsageError for bad input, ErrInterrupted when ctx
// ended first, and any other error when the lab itself broke.
func Run(ctx context.Context, o Options) (err error) {
	if err := o.check(); err != nil {
		return err
	}
	o.Stdout, o.Stderr = lockOutput(o.Stdout, o.Stderr) // the background's lines and the run's
	compareWith := ""
	if o.Out == "" {
		if err := os.MkdirAll(filepath.Join(o.Root, FreshOut), 0o755); err != nil {
			return &UsageError{fmt.Errorf("make %s: %w", FreshOut, err)}
		}
		o.Out = filepath.Join(o.Root, FreshOut, "run-"+time.Now().UTC().Format("20060102-150405.000"))
		compareWith = filepath.Join(o.Root, CommittedEvidence)
	}
	written := false
	defer func() {
		switch {
		case err == nil || errors.Is(err, ErrAuditInterrupted):
		case ctx.Err() != nil && written:
			err = fmt.Errorf("%w: %s was written but not audited (run audit on it, or run again)", ErrAuditInterrupted, o.Out)
		case ctx.Err() != nil:
			err = ErrInterrupted
		}
	}()
	runSuite, runExperiments := o.plan()
	schemas, err := strict.LoadSchemas(filepath.Join(o.Root, "schema"))
	if err != nil {
		return &UsageError{fmt.Errorf("%w (run the runner from the idemlab checkout)", err)}
	}
	var cases []casefile.Case
	if runSuite {
		if cases, err = casefile.LoadDir(filepath.Join(o.Root, "cases"), schemas); err != nil {
			return &UsageError{err}
		}
		if cases, err = selectCase(cases, o.Case); err != nil {
			return &UsageError{err}
		}
		if err := casefile.CheckSuite(cases, len(o.Stores)); err != nil {
			return &UsageError{err}
		}
		if o.Unsafe != protocol.Sound {
			cases = mutable(cases, o.Stdout)
			if len(cases) == 0 {
				return &UsageError{fmt.Errorf("-unsafe-registry %s: no selected case runs on the key registry (the downstream mode and key expiry refuse a mutant)", o.Unsafe)}
			}
		}
	}
	if err := evidence.CheckOutsideSources(o.Root, o.Out); err != nil {
		return &UsageError{err}
	}
	if o.SignKey != "" {
		// The audit signs, at the end: a key it cannot read is refused now.
		data, err := safefile.Read(o.SignKey, dsse.MaxKeyFile)
		if err != nil {
			return &UsageError{fmt.Errorf("-sign %s: %w", o.SignKey, err)}
		}
		if _, err = dsse.ParsePrivateKey(data); err != nil {
			return &UsageError{fmt.Errorf("-sign %s: %w", o.SignKey, err)}
		}
	}
	var targets, loaded []*target.Target
	if o.onTargets(runSuite) || o.chaosOnTargets(runExperiments) {
		dirs, err := findTargets(o)
		if err != nil {
			return err
		}
		if loaded, err = loadTargets(dirs, schemas); err != nil {
			return err
		}
	}
	if o.onTargets(runSuite) {
		targets = loaded
	}
	names, patterns := evidenceNames()
	if err := evidence.CheckTarget(o.Out, names, patterns...); err != nil {
		return &UsageError{err}
	}
	if compareWith != "" {
		fmt.Fprintf(o.Stdout, "writing %s (git-ignored; -out %s regenerates the committed evidence)\n", o.Out, CommittedEvidence)
	}
	tmp, swept, release, err := makeTemp(os.TempDir())
	if len(swept) > 0 {
		fmt.Fprintf(o.Stdout, "removed %d temp folders of runners that are gone: %s\n", len(swept), strings.Join(swept, ", "))
	}
	if err != nil {
		return err
	}
	defer release()
	// The lab's builds and the targets' setups run beside the rest, the
	// server's first: on a cold machine they take longer than the cases,
	// and the audit is needed only at the end (docs/commands.md).
	bg := newBackground(ctx)
	defer bg.stop()
	var waitServer later[labbuild.Binary]
	if o.ServerPath != "" {
		// A bad -server is a usage error before anything starts.
		server, err := serverBinary(ctx, o)
		if err != nil {
			return err
		}
		waitServer = func(context.Context) (labbuild.Binary, error) { return server, nil }
	} else {
		waitServer = start(bg, func(ctx context.Context) (labbuild.Binary, error) { return serverBinary(ctx, o) })
	}
	waitAudit := start(bg, func(ctx context.Context) (labbuild.Binary, error) {
		if _, err := waitServer(ctx); err != nil {
			return labbuild.Binary{}, err
		}
		return build(ctx, o, "./cmd/audit", "")
	})
	var databases caserun.Databases
	postgresVersion := ""
	needsPostgres := slices.ContainsFunc(loaded, func(t *target.Target) bool { return slices.Contains(t.Services, target.Postgres) })
	if slices.Contains(o.Stores, protocol.Postgres) && o.onStores() && (runSuite || slices.Contains(runExperiments, Chaos)) || needsPostgres {
		pg, err := startPostgres(ctx, &o)
		if err != nil {
			return err
		}
		if pg != nil {
			defer pg.Stop()
			databases = pg
			postgresVersion = pg.ServerVersion()
		}
	}
	var setupOf setups
	if len(targets) > 0 || o.chaosOnTargets(runExperiments) {
		if setupOf, err = startSetups(bg, loaded, databases != nil, o.Stdout); err != nil {
			return err
		}
	}
	server, err := waitServer(ctx)
	if err != nil {
		return err
	}
	if err := setupOf.waitAll(ctx, loaded); err != nil {
		return err
	}
	cfg := caserun.Config{ServerPath: server.Path, StateRoot: tmp, Protocol: caserun.DefaultProtocol, UnsafeRegistry: o.Unsafe, Databases: databases}
	if o.Protocol != nil {
		cfg.Protocol = *o.Protocol
	}
	git := evidence.GitState(o.Root)
	in := evidence.ManifestInput{Root: o.Root, Git: git, Protocol: cfg.Protocol, ServerSHA: server.SHA256, ServerBuild: server.Recipe, Postgres: postgresVersion, Unsafe: o.Unsafe,
		Flags: o.RecordedFlags(runExperiments)}
	var files []evidence.File
	if runSuite && o.onStores() {
		began := time.Now()
		grid, err := runAll(ctx, cfg, cases, o.Stores, o.Stdout)
		if err != nil {
			return err
		}
		wall := time.Since(began)
		fmt.Fprintf(o.Stdout, "%d runs in %s\n", len(grid.Runs()), wall.Round(time.Millisecond))
		if files, err = evidence.RunFiles(grid, evidence.Timing{Began: began, Wall: wall, Parallel: parallel}); err != nil {
			return err
		}
		for _, c := range cases {
			in.Cases = append(in.Cases, c.Name)
		}
		in.Stores = o.Stores
		if !slices.Contains(o.Stores, protocol.Postgres) {
			in.Postgres = "" // a target's postgres service ran on it, no store did
		}
	} else {
		// The manifest's PostgreSQL version goes with the postgres column
		// of the selection; an experiment-only run names no stores.
		in.Postgres = ""
	}
	if len(targets) > 0 {
		fmt.Fprintln(o.Stdout)
		tenv := targetEnv{root: o.Root, server: server.Path, stateRoot: tmp, databases: cfg.Databases, protocol: cfg.Protocol, out: o.Stdout, setups: setupOf}
		res, err := runTargets(ctx, tenv, targets, cases)
		if err != nil {
			return err
		}
		fs, err := evidence.TargetFiles(res)
		if err != nil {
			return err
		}
		files = append(files, fs...)
		in.Targets = res
		if len(in.Cases) == 0 {
			for _, c := range cases {
				in.Cases = append(in.Cases, c.Name)
			}
		}
	}
	env := experimentEnv{server: server.Path, stateRoot: tmp, seed: o.Seed, intents: o.Intents, retries: o.Retries, out: o.Stdout,
		stores: o.Stores, databases: cfg.Databases, chaos: o.Chaos, root: o.Root, setups: setupOf}
	if o.onStores() {
		env.chaosStores = o.Stores
	}
	if o.chaosOnTargets(runExperiments) {
		env.chaosTargets = loaded
	}
	for _, name := range runExperiments {
		e, _ := lookupExperiment(name) // checked by plan
		fs, err := e.run(ctx, env)
		if err != nil {
			return err
		}
		files = append(files, fs...)
		in.Experiments = append(in.Experiments, string(name))
	}
	m, err := evidence.NewManifest(in)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := evidence.Write(o.Out, schemas, files, m); err != nil {
		return err
	}
	written = true
	fmt.Fprintf(o.Stdout, "\nwrote %s\n\n", o.Out)
	auditBin, err := waitAudit(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return err // said by the deferred handler: written, not audited
		}
		return fmt.Errorf("%s was written but not audited: %w", o.Out, err)
	}
	if err := audit(ctx, o, auditBin.Path, git.Dirty); err != nil {
		return err
	}
	if compareWith == "" {
		return nil
	}
	return compareCommitted(ctx, o, auditBin.Path, compareWith, m.Selection)
}

// compareCommitted compares a fresh run with the committed evidence, with
// the audit's -compare, when both made the same selection: the
// deterministic files must be identical, the others differ as expected.
func compareCommitted(ctx context.Context, o Options, bin, committed string, sel evidence.Selection) error {
	b, err := os.ReadFile(filepath.Join(committed, evidence.ManifestName))
	if err != nil {
		fmt.Fprintf(o.Stdout, "\nnot compared with %s: %v\n", committed, err)
		return nil
	}
	var m struct {
		Selection evidence.Selection `json:"selection"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("compare with %s: %w", committed, err)
	}
	if !sameSelection(m.Selection, sel) {
		fmt.Fprintf(o.Stdout, "\nnot compared with %s: it selects %s; this run selected %s\n", committed, describeSelection(m.Selection), describeSelection(sel))
		return nil
	}
	fmt.Fprintf(o.Stdout, "\ncompared with the committed %s:\n", committed)
	cmd := exec.CommandContext(ctx, bin, "-root", o.Root, "-compare", committed, o.Out)
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return ErrDiffers
	default:
		return fmt.Errorf("run audit -compare: %w", err)
	}
}

func sameSelection(a, b evidence.Selection) bool {
	return slices.Equal(a.Cases, b.Cases) && slices.Equal(a.Stores, b.Stores) && slices.Equal(a.Targets, b.Targets) && slices.Equal(a.Experiments, b.Experiments)
}

// describeSelection is a selection in a few words.
func describeSelection(s evidence.Selection) string {
	return fmt.Sprintf("%d cases on stores [%s] and targets [%s], experiments [%s]", len(s.Cases),
		strings.Join(s.Stores, " "), strings.Join(s.Targets, " "), strings.Join(s.Experiments, " "))
}

// ErrNoPostgres means the postgres store was asked for on a machine
// without PostgreSQL's server programs.
var ErrNoPostgres = errors.New("the postgres store needs PostgreSQL's server programs: " + pgcluster.Hint + " (apt-get install -y postgresql), or run -store volatile or -store durable")

// postgresServer is what the postgres column runs on: a throwaway cluster
// the runner started, or an existing server (-pg-dsn).
type postgresServer interface {
	caserun.Databases
	Stop() error
	ServerVersion() string
}

// startPostgres starts the throwaway PostgreSQL the postgres column runs
// on, in a temp folder of its own, or attaches to -pg-dsn's server, saying
// what it does. Without PostgreSQL it drops the postgres store from
// o.Stores and says so in one line, unless the caller asked for that store
// (ErrNoPostgres). It returns nil when the column is skipped.
func startPostgres(ctx context.Context, o *Options) (postgresServer, error) {
	if o.PostgresDSN != "" {
		e, err := pgcluster.Attach(ctx, o.PostgresDSN)
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
	fmt.Fprintf(o.Stdout, "postgres %s: a throwaway cluster in %s (initdb %s, start %s), one database per run\n",
		pg.Version, pg.Dir, pg.InitIn.Round(time.Millisecond), pg.ReadyIn.Round(time.Millisecond))
	return pg, nil
}

// mutable keeps the cases a mutation run can run: a mutant is built into the
// key registry, and the server refuses one together with the downstream
// mode (whose claims live in the store) or key expiry. It says what it left
// out.
func mutable(cases []casefile.Case, out io.Writer) []casefile.Case {
	var kept, left []string
	var run []casefile.Case
	for _, c := range cases {
		if c.Ledger != nil || c.Server.KeyTTLMS > 0 {
			left = append(left, c.Name)
			continue
		}
		kept = append(kept, c.Name)
		run = append(run, c)
	}
	if len(left) > 0 {
		fmt.Fprintf(out, "mutation run: %d cases run on the key registry; left out (downstream mode or key expiry, which refuse a mutant): %s\n", len(kept), strings.Join(left, ", "))
	}
	return run
}

// selectCase narrows cases to -case's: one case file's name, or several
// separated by commas, run in case-file order; each named once.
func selectCase(cases []casefile.Case, list string) ([]casefile.Case, error) {
	if list == "" {
		return cases, nil
	}
	var names []string
	for _, c := range cases {
		names = append(names, c.Name)
	}
	wanted := strings.Split(list, ",")
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

// runAll runs every pair, at most a few at a time, each into its own cell
// of the grid, so the order of the evidence never depends on which finished
// first. Progress lines come in grid order too: a finished run is printed
// once every run before it has been. Whatever a run shows is an
// observation in its cell (the audit judges it); only a broken lab is an
// error, and it cancels the rest.
func runAll(ctx context.Context, cfg caserun.Config, cases []casefile.Case, stores []protocol.Store, progress io.Writer) (*evidence.Grid, error) {
	grid := evidence.NewGrid(cases, stores)
	done := make([]bool, len(grid.Runs()))
	next := 0 // the first cell not yet printed
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, c := range cases {
		for j, store := range stores {
			g.Go(func() error {
				obs, det, err := caserun.Run(ctx, cfg, c, store)
				if err != nil {
					return err
				}
				grid.Set(i, j, evidence.Run{Case: c, Store: store, Obs: obs, Detail: det})
				mu.Lock()
				defer mu.Unlock()
				done[i*len(stores)+j] = true
				for ; next < len(done) && done[next]; next++ {
					fmt.Fprintln(progress, progressLine(grid.Runs()[next]))
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return grid, nil
}

// build returns the lab's program pkg, built from the checkout with the
// pinned recipe or taken from the build cache when its sources are
// unchanged (see labbuild), saying what it builds before a real build.
func build(ctx context.Context, o Options, pkg, firstNote string) (labbuild.Binary, error) {
	return labbuild.Build(ctx, labbuild.Options{Root: o.Root, Package: pkg, Log: o.Stdout, FirstNote: firstNote})
}

// serverBinary is the effect server the cases run: -server's binary as it
// is, or cmd/effectserver built by build.
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

// progressLine is the line the runner prints when a run has finished: what
// it observed. The audit judges it at the end.
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

// audit runs the audit program on the evidence just written, as a separate
// process, with -write: it judges the observations, writes its verdicts
// and renderings into the folder, and its verdict is passed on. A run
// from a checkout with uncommitted changes is audited with -allow-dirty,
// and a mutation run with -allow-mutation: the audit still says so in its
// notes, and committed evidence (audited without them) must come from a
// clean tree and the sound registry.
func audit(ctx context.Context, o Options, bin string, dirty bool) error {
	args := []string{"-root", o.Root, "-write"}
	if o.SignKey != "" {
		args = append(args, "-sign", o.SignKey)
	}
	if dirty {
		args = append(args, "-allow-dirty")
	}
	if o.Unsafe != protocol.Sound {
		args = append(args, "-allow-mutation")
	}
	args = append(args, o.Out)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return ErrAuditFailed
	case errors.As(err, &exit) && interruptedBy(exit):
		// A Ctrl-C at the terminal reaches the audit too, maybe before
		// the runner's own context says so.
		return fmt.Errorf("%w: %s was written but not audited (run audit on it, or run again)", ErrAuditInterrupted, o.Out)
	default:
		return fmt.Errorf("run audit: %w", err)
	}
}

// interruptedBy reports whether a process ended by SIGINT or SIGTERM.
func interruptedBy(exit *exec.ExitError) bool {
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGTERM)
}

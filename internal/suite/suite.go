// Package suite is the runner's one job: load the cases, build the servers,
// run every (case, store) pair in parallel, write the evidence, and hand the
// folder to the audit program, a separate process, for the verdict.
package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"idemlab/internal/caseplan"
	"idemlab/internal/evidence"
	"idemlab/internal/labrun"
	"idemlab/internal/observation"
	"idemlab/internal/registry"
	"idemlab/internal/schemacheck"
)

// Options is one invocation of the runner.
type Options struct {
	Root       string           // the checkout: cases/, schema/, sources
	Out        string           // the evidence folder to write
	Stores     []string         // stores to run, in evidence order
	Case       string           // run only this case, and no experiment
	Experiment string           // run only this experiment, and no case
	Seed       uint64           // the retries experiment's seed
	Intents    int              // the retries experiment's intents per row; 0 is its default
	Unsafe     string           // run the cases on servers with this registry.Flaw, and no experiment
	ServerPath string           // a prebuilt effectserver; empty builds cmd/effectserver
	Protocol   *labrun.Protocol // nil runs with labrun.DefaultProtocol
	Stdout     io.Writer
	Stderr     io.Writer
}

// plan says what one invocation runs: the case suite unless -experiment
// names one experiment, and every experiment unless -case or -experiment
// narrows the run.
func (o Options) plan() (suite bool, experiments []string) {
	switch {
	case o.Experiment == NoExperiment:
		return true, nil
	case o.Experiment != "":
		return false, []string{o.Experiment}
	case o.Case != "", o.Unsafe != "":
		return true, nil
	default:
		return true, Experiments
	}
}

// check refuses an unknown experiment or flaw and flags that exclude each
// other, before anything is built or run.
func (o Options) check() error {
	if err := checkExperiment(o.Experiment); err != nil {
		return err
	}
	oneExperiment := o.Experiment != "" && o.Experiment != NoExperiment
	if oneExperiment && o.Case != "" {
		return &UsageError{errors.New("-case and -experiment exclude each other: a run is either cases or one experiment")}
	}
	if o.Unsafe == "" {
		return nil
	}
	if _, err := registry.ParseFlaw(o.Unsafe); err != nil {
		return &UsageError{fmt.Errorf("-unsafe-registry: %w", err)}
	}
	if oneExperiment {
		return &UsageError{errors.New("-unsafe-registry and -experiment exclude each other: a mutation run runs the cases")}
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

// ParseStores turns the -store flag into the stores to run.
func ParseStores(flag string) ([]string, error) {
	if flag == "all" {
		return slices.Clone(labrun.Stores), nil
	}
	if slices.Contains(labrun.Stores, flag) {
		return []string{flag}, nil
	}
	return nil, &UsageError{fmt.Errorf("-store %q: want one of %s, all", flag, strings.Join(labrun.Stores, ", "))}
}

// evidenceNames are the files the runner may write into the evidence folder.
var evidenceNames = append([]string{"results.json", "run.json", "REPORT.md", evidence.ManifestName}, experimentFiles...)

// Run runs the suite and returns nil when the audit passed, ErrAuditFailed
// when it did not, a *UsageError for bad input, and any other error when the
// lab itself broke.
func Run(ctx context.Context, o Options) error {
	if err := o.check(); err != nil {
		return err
	}
	runSuite, experiments := o.plan()
	schemas, err := schemacheck.Load(filepath.Join(o.Root, "schema"))
	if err != nil {
		return &UsageError{fmt.Errorf("%w (run the runner from the idemlab checkout)", err)}
	}
	var cases []caseplan.Case
	if runSuite {
		if cases, err = caseplan.LoadDir(filepath.Join(o.Root, "cases"), schemas); err != nil {
			return &UsageError{err}
		}
		if cases, err = selectCase(cases, o.Case); err != nil {
			return &UsageError{err}
		}
	}
	if err := evidence.CheckTarget(o.Out, evidenceNames); err != nil {
		return &UsageError{err}
	}

	tmp, err := os.MkdirTemp("", "idemlab-runner-")
	if err != nil {
		return fmt.Errorf("make temp folder: %w", err)
	}
	defer os.RemoveAll(tmp)
	server := o.ServerPath
	if server == "" {
		server = filepath.Join(tmp, "effectserver")
		if err := goBuild(ctx, o.Root, server, "./cmd/effectserver"); err != nil {
			return err
		}
	}
	auditBin := filepath.Join(tmp, "audit")
	if err := goBuild(ctx, o.Root, auditBin, "./cmd/audit"); err != nil {
		return err
	}
	serverBytes, err := os.ReadFile(server)
	if err != nil {
		return &UsageError{fmt.Errorf("-server: %w", err)}
	}

	cfg := labrun.Config{ServerPath: server, StateRoot: tmp, Protocol: labrun.DefaultProtocol, UnsafeRegistry: o.Unsafe}
	if o.Protocol != nil {
		cfg.Protocol = *o.Protocol
	}
	var g gitState
	g.commit, g.dirty = evidence.GitState(o.Root)
	var files []evidence.File
	if runSuite {
		began := time.Now()
		results, err := runAll(ctx, cfg, cases, o.Stores, o.Stdout)
		if err != nil {
			return err
		}
		wall := time.Since(began)
		fmt.Fprintf(o.Stdout, "\n%s\n%d runs in %s\n", summary(cases, o.Stores, results), len(results), wall.Round(time.Millisecond))
		if files, err = renderFiles(o, g, cases, results, wall, began); err != nil {
			return err
		}
	}
	for _, name := range experiments {
		fs, err := runExperiment(ctx, name, o, server, tmp)
		if err != nil {
			return err
		}
		files = append(files, fs...)
	}

	m, err := manifest(o, g, cases, experiments, cfg.Protocol, serverBytes)
	if err != nil {
		return err
	}
	if err := evidence.Write(o.Out, schemas, files, m); err != nil {
		return err
	}
	fmt.Fprintf(o.Stdout, "\nwrote %s\n\n", o.Out)
	return audit(ctx, o, auditBin)
}

func selectCase(cases []caseplan.Case, name string) ([]caseplan.Case, error) {
	if name == "" {
		return cases, nil
	}
	var names []string
	for _, c := range cases {
		if c.Name == name {
			return []caseplan.Case{c}, nil
		}
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("-case %q: no such case; cases are: %s", name, strings.Join(names, ", "))
}

// result is one finished (case, store) run and the runner's own verdict.
type result struct {
	c          caseplan.Case
	store      string
	obs        observation.Run
	det        labrun.Detail
	mismatches []string
}

// runAll runs every pair, at most a few at a time, each into its own slot so
// the order of the evidence never depends on which finished first. A case that
// fails its expectations is a verdict in its slot; only a broken lab is an
// error, and it cancels the rest.
func runAll(ctx context.Context, cfg labrun.Config, cases []caseplan.Case, stores []string, progress io.Writer) ([]result, error) {
	results := make([]result, len(cases)*len(stores))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	var mu sync.Mutex
	for i, c := range cases {
		for j, store := range stores {
			slot := i*len(stores) + j
			g.Go(func() error {
				x, ok := c.Expect[store]
				obs, det, err := labrun.Run(ctx, cfg, c, store)
				if err != nil {
					return err
				}
				r := result{c: c, store: store, obs: obs, det: det}
				if ok {
					r.mismatches = x.Mismatches(obs)
				} else {
					r.mismatches = []string{"no expectation for this store in " + c.File}
				}
				results[slot] = r
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintln(progress, progressLine(r))
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return results, nil
}

func progressLine(r result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-4s  %-22s %-8s counter=%-3d calls=%-3d %6.1fms", verdict(r), r.c.Name, r.store, r.obs.Counter, len(r.obs.Calls), ms(r.det.Wall))
	for _, m := range r.mismatches {
		fmt.Fprintf(&b, "\n        %s", m)
	}
	return b.String()
}

func verdict(r result) string {
	if len(r.mismatches) == 0 {
		return "pass"
	}
	return "FAIL"
}

// summary is the table printed after all runs: one row per case, one column
// per store with the counter and the runner's verdict.
func summary(cases []caseplan.Case, stores []string, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s", "case")
	for _, s := range stores {
		fmt.Fprintf(&b, "  %-16s", s)
	}
	b.WriteString("\n")
	for i, c := range cases {
		fmt.Fprintf(&b, "%-22s", c.Name)
		for j := range stores {
			r := results[i*len(stores)+j]
			fmt.Fprintf(&b, "  %-16s", fmt.Sprintf("%-3d %s", r.obs.Counter, verdict(r)))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// goBuild builds pkg as a static binary without file-system paths in it:
// the server's SHA-256 in the manifest then depends on the sources and the
// toolchain, not on where the checkout lives, and a static binary starts a
// few milliseconds sooner, which every case pays once per server.
func goBuild(ctx context.Context, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// audit runs the audit program on the evidence just written, as a separate
// process, and passes its verdict on.
func audit(ctx context.Context, o Options, bin string) error {
	args := []string{"-root", o.Root}
	if o.Case != "" {
		args = append(args, "-case", o.Case)
	}
	if len(o.Stores) == 1 {
		args = append(args, "-store", o.Stores[0])
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
	default:
		return fmt.Errorf("run audit: %w", err)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

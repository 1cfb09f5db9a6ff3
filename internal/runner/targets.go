package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"idemlab/internal/audit/strict"
	"idemlab/internal/caserun"
	"idemlab/internal/evidence"
	"idemlab/internal/target"
)

// This file runs the cases on targets, services the lab did not write
// (targets/NAME, or a folder -target names): every case the target can
// express (caserun.NotRun); the others are recorded as not run, and why.

// TargetsDir is the checkout's folder of shipped targets.
const TargetsDir = "targets"

// findTargets returns the folders of -target's targets, or of every shipped one.
func findTargets(o Options) ([]string, error) {
	names := o.Targets
	if len(names) == 0 {
		names = shippedNames(o.Root)
	}
	var dirs []string
	for _, t := range names {
		switch shipped := filepath.Join(o.Root, TargetsDir, t); {
		case !strings.ContainsRune(t, os.PathSeparator) && isDir(shipped):
			dirs = append(dirs, shipped)
		case isDir(t):
			dirs = append(dirs, t)
		default:
			return nil, &UsageError{fmt.Errorf("-target %s: neither a shipped target (%s) nor a folder", t, strings.Join(shippedNames(o.Root), ", "))}
		}
	}
	return dirs, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// shippedNames lists the folders of targets/, sorted.
func shippedNames(root string) []string {
	entries, _ := os.ReadDir(filepath.Join(root, TargetsDir))
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// loadTargets loads every target folder, refusing two targets of one name.
func loadTargets(dirs []string, schemas *strict.Schemas) ([]*target.Target, error) {
	var out []*target.Target
	seen := map[string]string{}
	for _, d := range dirs {
		t, err := target.Load(d, schemas)
		if err != nil {
			return nil, &UsageError{err}
		}
		if prev, dup := seen[t.Name]; dup {
			return nil, &UsageError{fmt.Errorf("target %s: %s and %s both have that name", t.Name, prev, t.Dir)}
		}
		seen[t.Name] = t.Dir
		out = append(out, t)
	}
	return out, nil
}

// casesOnTargets runs the cases on the targets, into targets.json.
func (inv *invocation) casesOnTargets(ctx context.Context) error {
	if len(inv.targets) == 0 {
		return nil
	}
	fmt.Fprintln(inv.Stdout)
	res := make([]evidence.TargetResult, len(inv.targets))
	lines := newOrderedOut(inv.Stdout, len(inv.targets))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(targetsAtOnce)
	for i, t := range inv.targets {
		g.Go(func() error {
			defer lines.finish(i)
			var err error
			res[i], err = inv.runTarget(gctx, t, lines.writer(i))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, r := range res {
		if r.Skipped != "" {
			inv.skippedNamed(r.Target, r.Skipped)
		}
	}
	files, err := evidence.TargetFiles(res)
	if err != nil {
		return err
	}
	inv.files = append(inv.files, files...)
	inv.in.Targets, inv.in.Cases = res, caseNames(inv.cases)
	return nil
}

// TargetError is a target's own failure, not the lab's (runner exit 7):
// its setup failed, its folder holds what the lab cannot read, its
// process could not start, exited before it was ready or never got ready,
// its count, journal or runtime-version command failed; or a target named
// with -target could not run here (a program it needs is missing), or a
// target of a plain run could not under IDEMLAB_REQUIRE_TARGETS=1.
type TargetError struct {
	Target string // the target's name
	Err    error
}

func (e *TargetError) Error() string {
	if msg := e.Err.Error(); strings.Contains(msg, e.Target) {
		return msg
	}
	return "target " + e.Target + ": " + e.Err.Error()
}

func (e *TargetError) Unwrap() error { return e.Err }

// targetsFault is err, a failure of t's own setup, folder or commands, as
// a *TargetError (nil stays nil).
func targetsFault(t *target.Target, err error) error {
	if err == nil || errors.As(err, new(*TargetError)) {
		return err
	}
	return &TargetError{Target: t.Name, Err: err}
}

// runFault is err, from a run on t (caserun.RunTarget, chaos.Run), as a
// *TargetError where caserun says what failed is t's own (a
// *caserun.TargetFault); any other error (the state folder, the sink, the
// proxy, PostgreSQL, the lab's effectserver) is the lab's and stays as it
// is. TestTargetFaults shows both on real processes.
func runFault(t *target.Target, err error) error {
	if _, ok := errors.AsType[*caserun.TargetFault](err); ok {
		return targetsFault(t, err)
	}
	return err
}

// skippedNamed notes that t was skipped, why says, where the user named
// it with -target: a *TargetError Run returns at its end, once the
// evidence is written and audited, since a run that could not run what it
// was asked to is not a pass. A plain run's shipped target that is skipped
// stays a skip.
func (inv *invocation) skippedNamed(t *target.Target, why string) {
	if len(inv.Targets) == 0 || slices.ContainsFunc(inv.skips, func(err error) bool { return err.(*TargetError).Target == t.Name }) {
		return
	}
	inv.skips = append(inv.skips, &TargetError{Target: t.Name, Err: fmt.Errorf("target %s, named with -target, could not run here: %s", t.Name, why)})
}

// targetsAtOnce bounds the targets run at once, targetParallel the cases
// run at once on one target.
const targetsAtOnce, targetParallel = 3, 4

// orderedOut lets targets that run at once print in target order: the
// first unfinished target's lines go straight out, the others' wait in a
// buffer until every target before them finished.
type orderedOut struct {
	mu    sync.Mutex
	out   io.Writer
	bufs  []bytes.Buffer
	done  []bool
	first int // the first unfinished target
}

func newOrderedOut(out io.Writer, n int) *orderedOut {
	return &orderedOut{out: out, bufs: make([]bytes.Buffer, n), done: make([]bool, n)}
}

// writer is target i's writer.
func (o *orderedOut) writer(i int) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if i == o.first {
			return o.out.Write(p)
		}
		return o.bufs[i].Write(p)
	})
}

// finish marks target i finished and lets the next ones' lines out.
func (o *orderedOut) finish(i int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done[i] = true
	for o.first < len(o.done) && o.done[o.first] {
		o.first++
		if o.first < len(o.bufs) {
			o.out.Write(o.bufs[o.first].Bytes())
			o.bufs[o.first].Reset()
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// runTarget runs the cases on t, at most targetParallel at once, once its
// setup is done; a target whose programs are missing is skipped.
func (inv *invocation) runTarget(ctx context.Context, t *target.Target, out io.Writer) (res evidence.TargetResult, err error) {
	res = evidence.TargetResult{Target: t}
	b, err := os.ReadFile(filepath.Join(t.Dir, target.FileName))
	if err != nil {
		return res, targetsFault(t, fmt.Errorf("target %s: %w", t.Name, err))
	}
	res.TargetJSON = b
	res.Dir = checkoutDir(inv.Root, t.Dir)
	if res.Digest, err = t.Digest(); err != nil {
		return res, targetsFault(t, err)
	}
	if res.Skipped, err = skipped(t, inv.pg != nil); err != nil {
		return res, err
	}
	if res.Skipped != "" {
		fmt.Fprintf(out, "target %s skipped: %s\n", t.Name, res.Skipped)
		return res, nil
	}
	if err := inv.setups.ensure(ctx, t, res.Digest, out); err != nil {
		return res, err
	}
	if res.Libraries, err = t.Libraries(); err != nil {
		return res, targetsFault(t, err)
	}
	if res.Runtime, err = t.RuntimeVersion(ctx); err != nil {
		return res, targetsFault(t, err)
	}

	cfg := caserun.TargetConfig{Target: t, StateRoot: inv.tmp, EffectServer: inv.server.Path, Databases: inv.cfg.Databases, ClientTimeout: inv.cfg.Protocol.ClientTimeout}
	// The cases that need no process of their own share the pool's
	// (caserun.Shareable); the runs' records hold each shared process's
	// exit once the pool closed, before they are written. An attached
	// target's pool holds its sink's address for the whole run.
	pool := caserun.NewPool(ctx, cfg)
	defer pool.Close()
	cfg.Pool = pool
	parallel := targetParallel
	if t.Attach != nil {
		parallel = 1 // one running service, its sink at one address
	} else {
		defer func() {
			if procs, runs := pool.Served(); runs > 0 && err == nil {
				fmt.Fprintf(out, "target %s: %d runs of the cases that need no process of their own shared %d processes (docs/targets.md, Shared processes)\n", t.Name, runs, procs)
			}
		}()
	}
	// Every trial of every case is one job: trials run at once like cases,
	// each on fresh state; a case's line is the one its last trial to end
	// returns, once every trial is in. A slice (-shard) runs the trials it
	// holds, a case with none has no record.
	type job struct{ run, trial int } // the record, and the trial's place in it (0: its first)
	var jobs []job
	var left []atomic.Int32
	for _, c := range inv.cases {
		r := evidence.TargetRun{Case: c, NotRun: caserun.NotRun(c, t)}
		held := inv.Shard.Trials(t.Name, c.Name, inv.trials())
		if r.NotRun != "" {
			held = inv.Shard.Trials(t.Name, c.Name, 1) // one record, trial 1's
		}
		if len(held) == 0 {
			continue
		}
		if r.NotRun == "" && len(held) > 1 {
			r.Further = make([]evidence.Trial, len(held)-1)
		}
		for k := range held {
			jobs = append(jobs, job{len(res.Runs), k})
		}
		res.Runs = append(res.Runs, r)
	}
	left = make([]atomic.Int32, len(res.Runs))
	for _, j := range jobs {
		left[j.run].Add(1)
	}
	err = inOrder(ctx, len(jobs), parallel, out, func(ctx context.Context, n int) (string, error) {
		i, k := jobs[n].run, jobs[n].trial
		r := &res.Runs[i]
		if r.NotRun != "" {
			if left[i].Add(-1) > 0 {
				return "", nil
			}
			return targetLine(t, *r), nil
		}
		obs, det, err := caserun.RunTarget(ctx, cfg, r.Case)
		if err != nil {
			return "", runFault(t, err)
		}
		if k == 0 {
			r.Obs, r.Detail = obs, det
		} else {
			r.Further[k-1] = evidence.Trial{Obs: obs, Detail: det}
		}
		if left[i].Add(-1) > 0 {
			return "", nil
		}
		return targetLine(t, *r), nil
	})
	return res, err
}

// checkoutDir is dir relative to the checkout at root as a slash path, or ""
// for the checkout itself or a folder outside it. Both are made absolute
// first: root is usually "." and a target's folder absolute, a pair
// filepath.Rel cannot relate.
func checkoutDir(root, dir string) string {
	absRoot, errRoot := filepath.Abs(root)
	absDir, errDir := filepath.Abs(dir)
	rel, err := filepath.Rel(absRoot, absDir)
	if errRoot != nil || errDir != nil || err != nil || !filepath.IsLocal(rel) || rel == "." {
		return ""
	}
	return filepath.ToSlash(rel)
}

// skipped says why t does not run here ("" when it does): a program it
// needs is missing. IDEMLAB_REQUIRE_TARGETS=1 (CI) makes that an error,
// a *TargetError.
func skipped(t *target.Target, havePostgres bool) (string, error) {
	why := missing(t, havePostgres)
	if why != "" && os.Getenv(target.RequireEnv) == "1" {
		return "", &TargetError{Target: t.Name, Err: fmt.Errorf("target %s: %s (%s=1 makes a missing program an error)", t.Name, why, target.RequireEnv)}
	}
	return why, nil
}

// missing says what t needs and this machine lacks, and what to install.
func missing(t *target.Target, havePostgres bool) string {
	progs, hint := t.Missing()
	var parts []string
	if len(progs) > 0 {
		parts = append(parts, fmt.Sprintf("%s not found (%s)", strings.Join(progs, ", "), hint))
	}
	for _, s := range t.Services {
		switch s {
		case target.Redis:
			if _, err := exec.LookPath(target.RedisProgram); err != nil {
				parts = append(parts, fmt.Sprintf("%s not found (%s)", target.RedisProgram, target.RedisHint))
			}
		case target.Postgres:
			if !havePostgres {
				parts = append(parts, "PostgreSQL not at hand (install Debian's postgresql package)")
			}
		}
	}
	return strings.Join(parts, "; ")
}

// targetLine is what a run on a target observed, as the runner prints it:
// with several trials, the effects each applied.
func targetLine(t *target.Target, r evidence.TargetRun) string {
	if r.NotRun != "" {
		return fmt.Sprintf("target %-28s %-42s not run: %s", t.Name, r.Case.Name, r.NotRun)
	}
	if len(r.Further) == 0 {
		return fmt.Sprintf("target %-28s %-42s effects applied=%-3d calls=%-3d %6.1fms", t.Name, r.Case.Name, r.Obs.Counter, len(r.Obs.Calls), ms(r.Detail.Wall))
	}
	applied := []string{strconv.FormatInt(r.Obs.Counter, 10)}
	wall := r.Detail.Wall
	for _, f := range r.Further {
		applied = append(applied, strconv.FormatInt(f.Obs.Counter, 10))
		wall += f.Detail.Wall
	}
	return fmt.Sprintf("target %-28s %-42s effects applied=%s in %d trials %6.1fms", t.Name, r.Case.Name, strings.Join(applied, ","), len(applied), ms(wall))
}

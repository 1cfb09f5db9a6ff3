package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ReproduceOptions say what Reproduce re-observes. No audit can re-derive
// a non-deterministic experiment's counts from its files: Reproduce runs
// the lab again as recorded and checks that the claims hold on the fresh
// observations and that no recorded count is far from them. Run 1 re-runs
// the whole selection (its deterministic files must be byte-identical),
// runs 2 to N only its non-deterministic experiments, which costs far less.
type ReproduceOptions struct {
	Root          string // the checkout
	Evidence      string // the recorded evidence folder
	Runs          int    // observations of the non-deterministic experiments, 1..MaxRuns
	AllowDirty    bool   // the recorded evidence and the re-runs may come from uncommitted sources
	AllowMutation bool   // the recorded evidence may be a mutation run
	VerifyKey     string // passed to the audit of the recorded evidence
	// From, when set, judges these folders instead of running the lab:
	// From[0] a whole run of the recorded selection, the others runs of
	// its non-deterministic experiments (made by hand, or elsewhere).
	From     []string
	Progress io.Writer // one line per runner invocation; nil for none
}

// MaxRuns bounds -runs: each run of the non-deterministic experiments
// takes about 25 s (retries 8-12 s, chaos 14-15 s on three stores at the
// default 3 s a store, measured on 2 cores), run 1 about 50 s.
const MaxRuns = 10

// FarFactor and FarSlack decide when a recorded count is "far": outside
// [min/FarFactor − FarSlack, FarFactor·max + FarSlack] of the re-runs.
// Counts that depend on timing vary threefold on a loaded machine
// (record-after-effect's duplicates: 50 to 151 over three runs), so a
// factor of 4 flags a forgery, not the machine's mood; the slack spares
// small counts.
const (
	FarFactor = 4
	FarSlack  = 5
)

// ErrCannotReproduce means the lab could not be run as recorded.
var ErrCannotReproduce = errors.New("cannot reproduce")

// Reproduction is what Reproduce found.
type Reproduction struct {
	Pass       bool           `json:"pass"`
	Invocation []string       `json:"invocations"` // each runner invocation's arguments
	Audit      *Report        `json:"audit"`       // the recorded evidence's own audit
	Files      []FileAgain    `json:"files"`       // the deterministic files of run 1 against the recorded ones
	Claims     []ClaimAgain   `json:"claims"`      // each claim of the non-deterministic files, on each re-run
	Counts     []CountAgain   `json:"counts"`      // each recorded count beside its re-observations
	Rates      []RateAgain    `json:"rates"`       // each case's rates on each target beside the re-run's
	ReRuns     []ReRunVerdict `json:"reruns"`      // each re-run folder's own audit
	Findings   []string       `json:"findings"`    // what did not hold, one line each
}

// FileAgain is one deterministic file, recorded against run 1.
type FileAgain struct {
	Name      string `json:"name"`
	Identical bool   `json:"identical"`
	Detail    string `json:"detail"`
}

// ClaimAgain is one claim and whether it held on each re-observation;
// Some: a target's race, which holds when one re-observation shows it,
// or when its rate over intents (Rates: recorded | re-observed) is
// plausible beside theirs (Implausible false; reproducetargets.go).
type ClaimAgain struct {
	Claim       string `json:"claim"`
	Held        []bool `json:"held"`
	Some        bool   `json:"some,omitempty"`
	Rates       string `json:"rates,omitempty"`
	Implausible bool   `json:"implausible,omitempty"`
}

// CountAgain is one recorded count and its re-observations.
type CountAgain struct {
	Name     string  `json:"name"`
	Recorded int64   `json:"recorded"`
	Again    []int64 `json:"reobserved"`
	Far      bool    `json:"far"`
	Flagged  bool    `json:"flagged"` // false: shown for scale (throughput), never flagged
}

// ReRunVerdict is a re-run's own audit.
type ReRunVerdict struct {
	Run      int      `json:"run"`
	What     string   `json:"what"`
	Pass     bool     `json:"pass"`
	Failures []string `json:"failures"`
}

// Reproduce audits the recorded evidence, then (unless it failed) runs
// the lab again as recorded and judges the re-runs; an error wraps
// ErrCannotReproduce when the lab could not be run as recorded.
func Reproduce(ctx context.Context, o ReproduceOptions) (*Reproduction, error) {
	if o.Runs < 1 || o.Runs > MaxRuns {
		return nil, fmt.Errorf("-runs %d: want 1..%d", o.Runs, MaxRuns)
	}
	rep, err := Audit(Options{Root: o.Root, Evidence: o.Evidence, AllowDirty: o.AllowDirty, AllowMutation: o.AllowMutation, VerifyKey: o.VerifyKey})
	if err != nil {
		return nil, err
	}
	r := &Reproduction{Audit: rep, Findings: []string{}}
	if rep.Shard != "" {
		return nil, fmt.Errorf("%w: %s is slice %s of a run: merge the slices (audit -merge), then reproduce the merged folder", ErrCannotReproduce, o.Evidence, rep.Shard)
	}
	if !rep.Pass {
		r.Findings = append(r.Findings, "the recorded evidence fails its audit: nothing to re-observe")
		return r, nil
	}
	p, err := readPlanner(o.Root, o.Evidence)
	if err != nil {
		return nil, err
	}
	full, err := p.fullRun()
	if err != nil {
		return nil, err
	}
	extra := p.laterRuns()
	dirs := o.From
	if dirs == nil {
		r.Invocation = append(r.Invocation, invocation(full))
		for range o.Runs - 1 {
			for _, e := range extra {
				r.Invocation = append(r.Invocation, invocation(e))
			}
		}
		tmp, made, err := o.runLab(ctx, full, extra)
		if tmp != "" {
			defer os.RemoveAll(tmp)
		}
		if err != nil {
			return r, err
		}
		dirs = made
	} else if len(dirs) == 0 {
		return nil, errors.New("-from: no folder")
	}
	return r, r.judge(o, dirs)
}

// A planner turns a recorded selection back into runner arguments,
// knowing that a plain run runs every case on every store and shipped
// target, and every experiment.
type planner struct {
	cases, stores, targets, exps []string // manifest.json's selection
	allCases, shipped            []string // the checkout's cases and shipped targets
	chaosWhere                   []string // the -store and -target flags of where chaos ran
	unsafe                       string   // -unsafe-registry, if recorded
	flags                        []string // the recorded knobs, as -name=value
}

// readPlanner reads the selection, knobs and chaos runs of the evidence
// and the cases and targets of the checkout.
func readPlanner(root, evidence string) (*planner, error) {
	m, err := readJSONFile(evidence, "manifest.json", CapManifest)
	if err != nil {
		return nil, err
	}
	sel := mapOf(m, "selection")
	p := &planner{cases: stringList(sel, "cases"), stores: stringList(sel, "stores"), targets: stringList(sel, "targets"),
		exps: stringList(sel, "experiments"), shipped: shippedTargets(root)}
	p.unsafe, _ = str(m, "unsafe_registry")
	flags := mapOf(m, "flags")
	for _, k := range sortedKeys(flags) {
		v, _ := flags[k].(string)
		p.flags = append(p.flags, "-"+k+"="+v)
	}
	if _, ok := flags["trials"]; !ok && len(p.targets) > 0 {
		p.flags = append(p.flags, "-trials=1") // evidence from before trials: one each, not the runner's default
	}
	cases, err := os.ReadDir(filepath.Join(root, "cases")) // checked by the recorded evidence's audit
	if err != nil {
		return nil, err
	}
	for _, e := range cases {
		if m := caseFileName.FindStringSubmatch(e.Name()); m != nil {
			p.allCases = append(p.allCases, m[1])
		}
	}
	if !slices.Contains(p.exps, "chaos") {
		return p, nil
	}
	doc, err := readJSONFile(evidence, ChaosFile, CapManifest)
	if err != nil {
		return nil, err
	}
	var stores, targets []string
	runs, _ := doc["runs"].([]any)
	for _, x := range runs {
		if t, _ := str(x.(map[string]any), "target"); t != "" {
			if !slices.Contains(targets, t) { // a target's trials are runs of their own
				targets = append(targets, t)
			}
		} else if s, _ := str(x.(map[string]any), "store"); s != "" {
			stores = append(stores, s)
		}
	}
	if p.chaosWhere, err = p.whereArgs(stores, targets); err != nil {
		return nil, err
	}
	if _, ok := flags["chaos-trials"]; !ok && len(targets) > 0 {
		p.flags = append(p.flags, "-chaos-trials=1") // evidence from before chaos trials: one each
	}
	return p, nil
}

// cannot says why the selection is not one runner invocation.
func (p *planner) cannot(format string, args ...any) error {
	return fmt.Errorf("%w: manifest.json selection: %s: not one runner invocation", ErrCannotReproduce, fmt.Sprintf(format, args...))
}

// whereArgs are the -store and -target flags of these stores and targets.
func (p *planner) whereArgs(stores, targets []string) ([]string, error) {
	var a []string
	switch {
	case len(stores) == 0:
	case slices.Equal(stores, StoreOrder) && slices.Equal(targets, p.shipped):
		return nil, nil
	case slices.Equal(stores, StoreOrder):
		a = []string{"-store", "all"}
	case len(stores) == 1:
		a = []string{"-store", stores[0]}
	default:
		return nil, p.cannot("stores %s: the runner runs one store or all of %s", strings.Join(stores, ", "), strings.Join(StoreOrder, ", "))
	}
	for _, t := range targets {
		a = append(a, "-target", t)
	}
	return a, nil
}

// fullRun is run 1: one experiment alone, or the cases where they ran,
// with every experiment or none.
func (p *planner) fullRun() ([]string, error) {
	var full []string
	if p.unsafe != "" {
		full = append(full, "-unsafe-registry", p.unsafe)
	}
	switch {
	case len(p.cases) == 0 && len(p.exps) == 1:
		full = append(full, "-experiment", p.exps[0])
		if p.exps[0] == "chaos" {
			full = append(full, p.chaosWhere...)
		}
		return append(full, p.flags...), nil
	case len(p.cases) == 0:
		return nil, p.cannot("no case and experiments %v", p.exps)
	case len(p.stores) == 0 && len(p.targets) == 0:
		return nil, p.cannot("cases on no store and no target")
	}
	caseFlag := !slices.Equal(p.cases, p.allCases)
	if caseFlag {
		full = append(full, "-case", strings.Join(p.cases, ","))
	}
	where, err := p.whereArgs(p.stores, p.targets)
	if err != nil {
		return nil, err
	}
	full = append(full, where...)
	// The runner adds every experiment to a run of the cases unless
	// -case, -unsafe-registry or -target narrows it.
	withExperiments := !caseFlag && p.unsafe == "" && !slices.Contains(where, "-target")
	switch {
	case len(p.exps) == 0 && withExperiments:
		full = append(full, "-experiment", "none")
	case len(p.exps) > 0 && (!withExperiments || !slices.Equal(p.exps, []string{"retries", "jitter", "chaos"})):
		return nil, p.cannot("cases with experiments %v", p.exps)
	}
	return append(full, p.flags...), nil
}

// laterRuns re-run each non-deterministic experiment selected (retries,
// chaos) where it ran, with the recorded knobs.
func (p *planner) laterRuns() [][]string {
	var extra [][]string
	if slices.Contains(p.exps, "retries") {
		extra = append(extra, slices.Concat([]string{"-experiment", "retries"}, p.flags))
	}
	if slices.Contains(p.exps, "chaos") {
		extra = append(extra, slices.Concat([]string{"-experiment", "chaos"}, p.chaosWhere, p.flags))
	}
	return extra
}

// shippedTargets are the checkout's targets/ folders with a target.json.
func shippedTargets(root string) []string {
	entries, _ := os.ReadDir(filepath.Join(root, "targets"))
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root, "targets", e.Name(), "target.json")); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// invocation names a runner invocation by its arguments.
func invocation(args []string) string {
	if len(args) == 0 {
		return "runner (a plain run: no flag)"
	}
	return "runner " + strings.Join(args, " ")
}

// readJSONFile reads a JSON object from a regular file inside dir.
func readJSONFile(dir, name string, limit int64) (map[string]any, error) {
	data, err := readInside(dir, name, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), unwrapPath(err))
	}
	c, ok := jsonCaps[name]
	if !ok {
		c = capManifestJSON
	}
	v, err := decodeJSON(data, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a JSON object", filepath.Join(dir, name))
	}
	return m, nil
}

// runLab builds the runner with the pinned recipe and runs it: run 1 with
// full, then o.Runs-1 times each of extra. It returns the folders written.
func (o ReproduceOptions) runLab(ctx context.Context, full []string, extra [][]string) (tmp string, dirs []string, err error) {
	tmp, err = os.MkdirTemp("", "audit-reproduce-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(tmp, "runner")
	build := exec.CommandContext(ctx, "go", pinnedBuildArgs(bin, "./cmd/runner")...)
	build.Dir, build.Env = o.Root, pinnedEnv()
	if out, err := build.CombinedOutput(); err != nil {
		return tmp, nil, fmt.Errorf("%w: build ./cmd/runner: %v\n%s", ErrCannotReproduce, err, bytes.TrimSpace(out))
	}
	invoke := func(n int, args []string) error {
		dir := filepath.Join(tmp, "run-"+strconv.Itoa(n)+"-"+strconv.Itoa(len(dirs)), "evidence")
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return err
		}
		logName := filepath.Join(filepath.Dir(dir), "runner.log")
		log, err := os.Create(logName)
		if err != nil {
			return err
		}
		defer log.Close()
		cmd := exec.CommandContext(ctx, bin, append([]string{"-out", dir}, args...)...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = o.Root, log, log
		// An interrupt reaches the runner as one: it stops its servers and
		// databases and exits (runner exit 4 or 5), never SIGKILLed with
		// its children left behind.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 2 * time.Minute
		began := time.Now()
		err = cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "run %d: %s: exit %d in %s\n", n, invocation(args), code, time.Since(began).Round(time.Second))
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil || code == 1: // 1: its own audit failed; the evidence is written, and judged here
			dirs = append(dirs, dir)
			return nil
		}
		tail, _ := os.ReadFile(logName)
		tail = tail[max(0, len(tail)-4000):]
		return fmt.Errorf("%w: run %d: runner %s: %v\n%s", ErrCannotReproduce, n, strings.Join(args, " "), err, bytes.TrimSpace(tail))
	}
	if err := invoke(1, full); err != nil {
		return tmp, nil, err
	}
	for n := 2; n <= o.Runs; n++ {
		for _, e := range extra {
			if err := invoke(n, e); err != nil {
				return tmp, nil, err
			}
		}
	}
	return tmp, dirs, nil
}

// judge audits each re-run folder and compares it with the recorded one.
func (r *Reproduction) judge(o ReproduceOptions, dirs []string) error {
	recorded, err := readJSONFile(o.Evidence, "manifest.json", CapManifest)
	if err != nil {
		return err
	}
	for i, dir := range dirs {
		m, err := readJSONFile(dir, "manifest.json", CapManifest)
		if err != nil {
			return err
		}
		what := "the recorded selection"
		if i > 0 {
			what = "experiments " + strings.Join(stringList(mapOf(m, "selection"), "experiments"), ", ")
		}
		if err := sameRecipe(recorded, m, i == 0); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCannotReproduce, dir, err)
		}
		// A re-run's own dirtiness is the checkout's now (an edited
		// README makes it so): what matters is that it ran the recorded
		// sources, which sameRecipe requires.
		rep, err := Audit(Options{Root: o.Root, Evidence: dir, AllowDirty: true, AllowMutation: o.AllowMutation})
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		v := ReRunVerdict{Run: i + 1, What: what, Pass: rep.Pass, Failures: []string{}}
		for _, f := range rep.Failures {
			v.Failures = append(v.Failures, f.Message)
		}
		r.ReRuns = append(r.ReRuns, v)
		if !rep.Pass {
			r.Findings = append(r.Findings, fmt.Sprintf("re-run %d (%s) fails its own audit (%s): %s", i+1, what, plural(len(v.Failures), "check"), v.Failures[0]))
		}
	}
	r.compareFiles(o.Evidence, dirs[0], recorded)
	if err := r.againRetries(o.Evidence, recorded, dirs); err != nil {
		return err
	}
	if err := r.againChaos(o.Evidence, dirs); err != nil {
		return err
	}
	if err := r.againTargets(o.Evidence, dirs); err != nil { // reproducetargets.go
		return err
	}
	r.Pass = len(r.Findings) == 0
	return nil
}

// sameRecipe refuses a re-run of another selection (or experiment),
// sources, knobs or registry than the recorded.
func sameRecipe(recorded, m map[string]any, whole bool) error {
	rs, ms := mapOf(recorded, "selection"), mapOf(m, "selection")
	if whole {
		for _, k := range []string{"cases", "stores", "targets", "experiments"} {
			if a, b := render(rs[k]), render(ms[k]); a != b {
				return fmt.Errorf("it selected %s %s, the recorded evidence %s", k, b, a)
			}
		}
	} else if e := stringList(ms, "experiments"); len(e) != 1 || !slices.Contains(stringList(rs, "experiments"), e[0]) {
		return fmt.Errorf("it ran experiments %v, want one of the recorded %v", e, stringList(rs, "experiments"))
	}
	if a, b := render(recorded["unsafe_registry"]), render(m["unsafe_registry"]); a != b {
		return fmt.Errorf("its unsafe_registry is %s, the recorded %s", b, a)
	}
	rsrc, msrc := mapOf(recorded, "sources"), mapOf(m, "sources")
	for _, p := range sortedKeys(rsrc) {
		if render(rsrc[p]) != render(msrc[p]) {
			return fmt.Errorf("it ran other sources than the recorded evidence: %s differs (the checkout changed)", p)
		}
	}
	for _, p := range sortedKeys(msrc) {
		if _, ok := rsrc[p]; !ok {
			return fmt.Errorf("it ran other sources than the recorded evidence: %s is new (the checkout changed)", p)
		}
	}
	// The knobs of the experiments it ran must be the recorded ones.
	rf, mf := mapOf(recorded, "flags"), mapOf(m, "flags")
	for _, k := range knobFlags {
		if !k.applies(stringList(ms, "experiments"), stringList(ms, "targets")) {
			continue
		}
		if a, b := render(rf[k.flag]), render(mf[k.flag]); a != b {
			return fmt.Errorf("its flags.%s is %s, the recorded %s", k.flag, b, a)
		}
	}
	return nil
}

// compareFiles compares the recorded deterministic files with run 1's.
func (r *Reproduction) compareFiles(recordedDir, run1 string, recorded map[string]any) {
	listed := stringMap(recorded, "files")
	for _, f := range DeterministicFiles {
		if _, ok := listed[f.Name]; !ok {
			continue
		}
		a, errA := readInside(recordedDir, f.Name, capOf(f.Name))
		b, errB := readInside(run1, f.Name, capOf(f.Name))
		fa := FileAgain{Name: f.Name, Identical: errA == nil && errB == nil && bytes.Equal(a, b)}
		switch {
		case errB != nil:
			fa.Detail = "run 1 wrote no " + f.Name
		case errA != nil:
			fa.Detail = "cannot read the recorded one: " + unwrapPath(errA).Error()
		case !fa.Identical && f.field != "":
			fa.Detail = strings.Join(f.explain(a, b, "the recorded evidence", "run 1"), "; ")
		case !fa.Identical:
			fa.Detail = firstDiff(a, b)
		}
		r.Files = append(r.Files, fa)
		if !fa.Identical {
			r.Findings = append(r.Findings, fmt.Sprintf("%s: run 1's differs from the recorded one, which is deterministic: %s", f.Name, fa.Detail))
		}
	}
}

// far reports whether recorded is far from its re-observations.
func far(recorded int64, again []int64) bool {
	if len(again) == 0 {
		return false
	}
	lo, hi := float64(slices.Min(again))/FarFactor-FarSlack, float64(slices.Max(again))*FarFactor+FarSlack
	return float64(recorded) < lo || float64(recorded) > hi
}

// ints prints xs separated by spaces.
func ints(xs []int64) string { return strings.Trim(fmt.Sprint(xs), "[]") }

// count records one count beside its re-observations.
func (r *Reproduction) count(name string, recorded int64, again []int64, flagged bool) {
	c := CountAgain{Name: name, Recorded: recorded, Again: again, Flagged: flagged}
	c.Far = flagged && far(recorded, again)
	r.Counts = append(r.Counts, c)
	if c.Far {
		r.Findings = append(r.Findings, fmt.Sprintf("%s: recorded %d, far from the re-runs' %s", name, recorded, ints(again)))
	}
}

// claimAgain records one claim's verdict on each re-observation.
func (r *Reproduction) claimAgain(claim string, held []bool) {
	r.Claims = append(r.Claims, ClaimAgain{Claim: claim, Held: held})
	var not []string
	for i, h := range held {
		if !h {
			not = append(not, strconv.Itoa(i+1))
		}
	}
	if len(not) > 0 {
		r.Findings = append(r.Findings, fmt.Sprintf("%s: did not hold again (observation %s of %d)", claim, strings.Join(not, ", "), len(held)))
	}
}

// againRetries checks retries.json's row claims on every re-run, and
// compares each count.
func (r *Reproduction) againRetries(recordedDir string, recorded map[string]any, dirs []string) error {
	if !slices.Contains(stringList(mapOf(recorded, "selection"), "experiments"), "retries") {
		return nil
	}
	rec, _, again, err := itemsAgain(recordedDir, dirs, RetriesFile, "rows", rowName)
	if err != nil {
		return err
	}
	probe := &auditor{manifest: recorded, report: &Report{}}
	for _, w := range retriesRows {
		name := w.name
		for _, c := range w.claims {
			if !probe.retriesClaimApplies(name+" "+c.field, c.needs) {
				continue
			}
			want := "= 0"
			if c.positive {
				want = "> 0"
			}
			held := make([]bool, len(again))
			for i, rows := range again {
				n := number(rows[name][c.field])
				held[i] = rows[name] != nil && (c.positive && n > 0 || !c.positive && n == 0)
			}
			r.claimAgain(fmt.Sprintf("retries.json %s: %s %s", name, c.field, want), held)
		}
	}
	for _, w := range retriesRows {
		r.countsAgain("retries.json "+w.name, rec[w.name], again, w.name, "", []string{"lost", "applied_once", "duplicated", "sent", "refused"}, nil)
	}
	return nil
}

// itemsAgain reads file's array field, each object by name ("" leaves it
// out), in the recorded folder (names in order too) and each re-run's.
func itemsAgain(recordedDir string, dirs []string, file, field string, name func(any) string) (map[string]map[string]any, []string, []map[string]map[string]any, error) {
	itemsOf := func(dir string) (map[string]map[string]any, []string, error) {
		doc, err := readJSONFile(dir, file, capOf(file))
		if err != nil {
			return nil, nil, err
		}
		out, list := map[string]map[string]any{}, []string{}
		items, _ := doc[field].([]any)
		for _, x := range items {
			if n := name(x); n != "" {
				out[n], _ = x.(map[string]any)
				list = append(list, n)
			}
		}
		return out, list, nil
	}
	rec, order, err := itemsOf(recordedDir)
	if err != nil {
		return nil, nil, nil, err
	}
	var again []map[string]map[string]any
	for _, d := range dirs {
		if items, _, err := itemsOf(d); err == nil {
			again = append(again, items)
		}
	}
	return rec, order, again, nil
}

// countsAgain records the flagged fields, then the scale fields, of rec
// (of its member sub, if any) beside those of object name on each re-run.
func (r *Reproduction) countsAgain(label string, rec map[string]any, again []map[string]map[string]any, name, sub string, flagged, scale []string) {
	counts := func(m map[string]any) map[string]any {
		if sub == "" {
			return m
		}
		return mapOf(m, sub)
	}
	for i, f := range slices.Concat(flagged, scale) {
		var xs []int64
		for _, items := range again {
			if items[name] != nil {
				xs = append(xs, number(counts(items[name])[f]))
			}
		}
		r.count(label+" "+f, number(counts(rec)[f]), xs, i < len(flagged))
	}
}

// chaosFlagged are the chaos counts flagged when far: the outcomes;
// chaosScale are shown for scale (they measure the machine's speed).
var (
	chaosFlagged = []string{"duplicates", "lost_acks", "stuck", "not_applied"}
	chaosScale   = []string{"intents", "attempts", "kills", "crash_exits", "restarts"}
)

// againChaos checks, on every re-run's verdicts.json, that each store's
// promised rules held, and compares the counts.
func (r *Reproduction) againChaos(recordedDir string, dirs []string) error {
	if _, err := os.Lstat(filepath.Join(recordedDir, ChaosFile)); err != nil {
		return nil // no chaos run recorded
	}
	// Every folder has verdicts.json; only those that ran chaos judged it.
	var chaosDirs []string
	for _, d := range dirs {
		if _, err := os.Lstat(filepath.Join(d, ChaosFile)); err == nil {
			chaosDirs = append(chaosDirs, d)
		}
	}
	rec, subjects, again, err := itemsAgain(recordedDir, chaosDirs, VerdictsFile, "chaos", func(x any) string {
		m, _ := x.(map[string]any)
		s, _ := str(m, "store")
		return s // a target's trials are read by chaosTrialsOf
	})
	if err != nil {
		return err
	}
	for _, s := range subjects {
		for _, rule := range chaosRules {
			if m := ruleOf(rec[s], rule); m == nil || m["promised"] != true {
				continue
			}
			held := make([]bool, len(again))
			for i, runs := range again {
				m := ruleOf(runs[s], rule)
				held[i] = m != nil && number(m["count"]) == 0
			}
			r.claimAgain(fmt.Sprintf("chaos %s: no %s", s, rule), held)
		}
	}
	for _, s := range subjects {
		r.countsAgain("chaos "+s, rec[s], again, s, "counts", chaosFlagged, chaosScale)
	}
	return r.againChaosTargets(recordedDir, chaosDirs)
}

// againChaosTargets sets what each target did under chaos, over its
// trials, beside the re-runs' (reproducetargets.go), and each count summed
// over a run's trials beside the re-runs' sums.
func (r *Reproduction) againChaosTargets(recordedDir string, dirs []string) error {
	rec, targets, err := chaosTrialsOf(recordedDir)
	if err != nil {
		return err
	}
	var again []map[string][]map[string]any
	for _, d := range dirs {
		if trials, _, err := chaosTrialsOf(d); err == nil {
			again = append(again, trials)
		}
	}
	for _, t := range targets {
		var trials [][]map[string]any
		for _, runs := range again {
			trials = append(trials, runs[t])
		}
		r.targetChaosAgain(t, rec[t], trials)
	}
	for _, t := range targets {
		// countsAgain reads each run's counts by name: one item per run,
		// a target's counts summed over its trials.
		var againSums []map[string]map[string]any
		for _, runs := range again {
			if runs[t] != nil {
				againSums = append(againSums, map[string]map[string]any{t: summedCounts(runs[t])})
			}
		}
		label := "chaos target " + t
		if n := len(rec[t]); n > 1 {
			label += fmt.Sprintf(" (%d trials)", n)
		}
		r.countsAgain(label, summedCounts(rec[t]), againSums, t, "", chaosFlagged, chaosScale)
	}
	return nil
}

// chaosTrialsOf reads the chaos verdicts of the targets in dir's
// verdicts.json, each target's trials in order, and the targets in theirs
// (one that did not run has nothing to re-observe).
func chaosTrialsOf(dir string) (map[string][]map[string]any, []string, error) {
	doc, err := readJSONFile(dir, VerdictsFile, capOf(VerdictsFile))
	if err != nil {
		return nil, nil, err
	}
	out, order := map[string][]map[string]any{}, []string{}
	items, _ := doc["chaos"].([]any)
	for _, x := range items {
		m, _ := x.(map[string]any)
		t, _ := str(m, "target")
		if t == "" || notRun(m) != "" {
			continue
		}
		if out[t] == nil {
			order = append(order, t)
		}
		out[t] = append(out[t], m)
	}
	return out, order, nil
}

// summedCounts are a target's chaos counts summed over its trials.
func summedCounts(trials []map[string]any) map[string]any {
	n := map[string]int64{}
	for _, t := range trials {
		for k, v := range mapOf(t, "counts") {
			n[k] += number(v)
		}
	}
	sum := map[string]any{}
	for k, v := range n {
		sum[k] = json.Number(strconv.FormatInt(v, 10))
	}
	return sum
}

// ruleOf is a chaos verdict's line of rule, nil without one.
func ruleOf(run map[string]any, rule string) map[string]any {
	rules, _ := run["rules"].([]any)
	for _, x := range rules {
		m, _ := x.(map[string]any)
		if n, _ := str(m, "rule"); n == rule {
			return m
		}
	}
	return nil
}

// WriteText prints the reproduction.
func (r *Reproduction) WriteText(w io.Writer) error {
	if !r.Audit.Pass {
		if err := r.Audit.WriteText(w); err != nil {
			return err
		}
		_, err := fmt.Fprintln(w, "NOT REPRODUCED: the recorded evidence fails its audit: nothing to re-observe")
		return err
	}
	p := &printer{w: w}
	for i, inv := range r.Invocation {
		p.f("invocation %d: %s\n", i+1, inv)
	}
	if len(r.Files) > 0 {
		p.f("deterministic files, run 1 against the recorded evidence:\n")
		for _, f := range r.Files {
			if f.Identical {
				p.f("  identical: %s\n", f.Name)
			} else {
				p.f("  DIFFERS: %s: %s\n", f.Name, f.Detail)
			}
		}
	}
	if len(r.Claims) > 0 {
		p.f("claims, on each re-observation:\n")
		for _, c := range r.Claims {
			n := len(slices.DeleteFunc(slices.Clone(c.Held), func(h bool) bool { return !h }))
			verdict := "held again"
			switch {
			case c.Some && c.Implausible:
				verdict = "NOT HELD AGAIN, implausible (" + c.Rates + ")"
			case c.Some && n == 0:
				verdict = "not held again, at a plausible rate (" + c.Rates + ")"
			case c.Some:
				verdict = "held again (a target's race: on one at least)"
			case n < len(c.Held):
				verdict = "NOT HELD AGAIN"
			}
			p.f("  %s %d/%d: %s\n", verdict, n, len(c.Held), c.Claim)
		}
	}
	r.writeCounts(p)
	r.writeRates(p) // reproducetargets.go
	for _, v := range r.ReRuns {
		if v.Pass {
			p.f("re-run %d (%s): its own audit passed\n", v.Run, v.What)
			continue
		}
		p.f("re-run %d (%s): its own audit FAILED (%s):\n", v.Run, v.What, plural(len(v.Failures), "check"))
		for _, f := range v.Failures[:min(len(v.Failures), 10)] {
			p.f("  %s\n", f)
		}
	}
	if r.Pass {
		p.f("REPRODUCED: the deterministic files are identical, every claim held again on every re-observation (a target's chaos findings at a plausible rate over its trials), no recorded count is far from the re-runs, and no recorded rate on a target is implausible beside the re-run's\n")
		return p.err
	}
	p.f("NOT REPRODUCED: %s\n", plural(len(r.Findings), "finding"))
	for _, f := range r.Findings {
		p.f("  %s\n", f)
	}
	return p.err
}

// writeCounts prints each recorded count beside its re-observations.
func (r *Reproduction) writeCounts(p *printer) {
	if len(r.Counts) == 0 {
		return
	}
	p.f("counts, recorded | re-observed; FAR: outside [min/%d - %d, %d*max + %d] of the re-runs (counts that depend on timing vary about threefold between runs on a loaded machine); (scale): not flagged, they measure the machine's speed:\n",
		FarFactor, FarSlack, FarFactor, FarSlack)
	width := 0
	for _, c := range r.Counts {
		width = max(width, len(c.Name))
	}
	for _, c := range r.Counts {
		mark := ""
		switch {
		case c.Far:
			mark = "  FAR"
		case !c.Flagged:
			mark = "  (scale)"
		}
		p.f("  %-*s %6d | %s%s\n", width, c.Name, c.Recorded, ints(c.Again), mark)
	}
}

// WriteJSON prints the reproduction as one indented JSON object.
func (r *Reproduction) WriteJSON(w io.Writer) error { return writeJSON(w, r) }

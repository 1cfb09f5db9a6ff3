package audit

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"idemlab/internal/audit/chaosplan"
)

// The chaos experiment's files: one summary; per store and per target a
// history and its timeline.
const ChaosFile = "chaos.json"

// chaosSubject names what one chaos run ran on: a store, or a trial on a
// target (from 1: chaos runs in trials on a target, once on a store).
type chaosSubject struct {
	store, target string // exactly one is set
	trial         int    // on a target, from 1; 0 on a store
}

func (s chaosSubject) String() string {
	switch {
	case s.target != "" && s.trial > 0:
		return fmt.Sprintf("target %s trial %d", s.target, s.trial)
	case s.target != "":
		return "target " + s.target
	}
	return "store " + s.store
}

// base is the evidence name of the run's files without extension:
// chaos-STORE, or chaos-target-NAME for a target's first trial and
// chaos-target-NAME.trialN for a later one (a store's name never starts
// with "target-", and no target's name holds a dot).
func (s chaosSubject) base() string {
	switch {
	case s.target == "":
		return "chaos-" + s.store
	case s.trial > 1:
		return fmt.Sprintf("chaos-target-%s.trial%d", s.target, s.trial)
	}
	return "chaos-target-" + s.target
}

// chaosFileName matches the name of a chaos history or timeline: group 2
// the target's name and group 3 a later trial's number, or group 4 the
// store's; group 5 the extension.
var chaosFileName = regexp.MustCompile(`^chaos-(target-([a-z][a-z0-9-]{0,47})(?:\.trial([2-9]|10))?|([a-z]+))\.(jsonl|svg)$`)

// subjectOf is the subject a chaos file name names, if it is one.
func subjectOf(name string) (chaosSubject, string, bool) {
	m := chaosFileName.FindStringSubmatch(name)
	if m == nil {
		return chaosSubject{}, "", false
	}
	sub := chaosSubject{store: m[4], target: m[2]}
	if sub.target != "" {
		sub.trial, _ = strconv.Atoi(cmp.Or(m[3], "1"))
	}
	return sub, m[5], true
}

// maxChaosTrials bounds a target's chaos trials (runner -chaos-trials;
// the audit's copy of the runner's MaxChaosTrials).
const maxChaosTrials = 10

// maxChaosLines bounds the failure lines one rule prints per store; the
// rest are counted in one more line.
const maxChaosLines = 10

// The checker's rules, in chaos.json's order.
var chaosRules = []string{"duplicate", "lost_ack", "stuck", "value_mismatch", "value_reused", "value_order", "unknown_effect", "bad_journal"}

// chaosClaims are what a store or a target promises: keys that survive a
// restart (durable), in one store its replicas share.
type chaosClaims struct {
	durable, shared bool
}

// storeClaims are the lab's own stores' claims: the volatile store keeps
// its keys in one process's memory, the others in a store the replicas
// share that survives a restart.
func storeClaims(store string) chaosClaims {
	if store == "volatile" {
		return chaosClaims{}
	}
	return chaosClaims{true, true}
}

// promised reports whether h's claims promise, with its replicas, that
// rule never fires: every rule but the duplicate always; no duplicate
// only with a durable store of keys, shared by the replicas when there are
// several. Without, a duplicate after a restart or on another replica is
// the design's: counted and shown.
func (h *chaosHistory) promised(rule string) bool {
	return rule != "duplicate" || h.claims.durable && (h.replicas == 1 || h.claims.shared)
}

// isStreamed reports whether checkFiles must hash the listed file p by
// streaming it (a chaos history or its timeline, too large to hold whole:
// both grow with the run) instead of reading it; when so it has done so,
// with the same checks and counts.
func (a *auditor) isStreamed(p string) bool {
	if _, _, ok := subjectOf(p); !ok {
		return false
	}
	if !slices.Contains(a.selected("experiments"), "chaos") {
		a.fail(Failure{Check: CheckExperiment, Field: "selection.experiments",
			Message: fmt.Sprintf("manifest.json: selection.experiments: lists no chaos, but manifest.files lists %s", p)})
	}
	a.hashListed(p, CapHistory)
	return true
}

// openInside opens the regular file at the slash path rel inside dir with
// readInside's rules (no symlink on the way, nothing but a regular file,
// at most limit bytes), for streaming.
func openInside(dir, rel string, limit int64) (*os.File, error) {
	if !cleanRel(rel) {
		return nil, errors.New("not a clean relative path")
	}
	p := dir
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		switch last := i == len(parts)-1; {
		case fi.Mode()&os.ModeSymlink != 0:
			return nil, errSymlink
		case !last && !fi.IsDir(), last && !fi.Mode().IsRegular():
			return nil, errNotRegular
		case last && fi.Size() > limit:
			return nil, &tooLargeError{fi.Size(), limit}
		}
	}
	fi, _ := os.Lstat(p)
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) {
		f.Close()
		return nil, errors.New("changed while being read")
	}
	return f, nil
}

// hashInside returns the SHA-256 (hex) of a file opened by openInside,
// read at most limit+1 bytes.
func hashInside(dir, rel string, limit int64) (string, error) {
	f, err := openInside(dir, rel, limit)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, limit+1))
	if err != nil {
		return "", err
	}
	if n > limit {
		return "", &tooLargeError{n, limit}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// chaosFail records one failed chaos check of subject s (zero: of the
// whole experiment).
func (a *auditor) chaosFail(s chaosSubject, field, format string, args ...any) {
	a.fail(Failure{Check: CheckChaos, Store: s.store, Target: s.target, Field: field, Message: fmt.Sprintf(format, args...)})
}

// checkChaos checks the chaos experiment: chaos.json against its schema;
// one run per store the chaos experiment covers (the selection's stores;
// when the selection names none, as a chaos-only run writes it, the
// stores chaos.json lists), in store order, then one per target (the
// selection's targets; when it names none, the targets chaos.json lists),
// each with its history and timeline listed, or, for a target, saying why
// it did not run; every history parsed strictly and judged again by the
// audit's own checker by the claims of its store or target; chaos.json's
// counts and verdict equal to what the audit derived; no violation of a
// rule the claims promise; the seeded schedule drawn again from the
// history's seed and parameters and compared with every attempt and every
// planned kill (chaosplan); and the timeline drawn again and
// compared byte for byte (chaossvg.go).
func (a *auditor) checkChaos() {
	a.check()
	doc := a.experimentDoc(ChaosFile, a.schemas.Chaos)
	if doc == nil {
		return
	}
	runs, _ := doc["runs"].([]any)
	stores, targets, bySubject := a.chaosRuns(runs)
	a.checkChaosSelection(len(runs), stores, targets, bySubject)
	a.checkChaosTrials(targets, bySubject)
	crash := number(mapOf(a.manifest, "protocol")["crash_exit_code"])
	for _, s := range stores {
		a.checkChaosRun(chaosSubject{store: s}, bySubject[chaosSubject{store: s}], crash)
	}
	for _, t := range targets {
		sub := chaosSubject{target: t, trial: 1}
		if why := notRun(bySubject[sub]); why != "" {
			dir, _ := str(bySubject[sub], "target_dir")
			a.checkChaosNotRun(t, dir, why)
			a.chaosVerdicts = append(a.chaosVerdicts, ChaosVerdict{Target: t, NotRun: why, Counts: map[string]int64{}, Faults: map[string]int64{}, SinkFaults: map[string]SinkFault{},
				Rules: []ChaosRuleVerdict{}, Findings: []ChaosFinding{}})
			continue
		}
		for ; bySubject[sub] != nil; sub.trial++ {
			a.checkChaosRun(sub, bySubject[sub], crash)
		}
	}
}

// chaosRuns reads chaos.json's runs: each on a store, or a trial on a
// target (a target's trials in order from 1; one run, with no trial, for
// a target that did not run), the stores first. It returns the stores and
// the targets in their order, and each subject's run.
func (a *auditor) chaosRuns(runs []any) (stores, targets []string, bySubject map[chaosSubject]map[string]any) {
	bySubject = map[chaosSubject]map[string]any{}
	for i, r := range runs {
		run, _ := r.(map[string]any)
		s, _ := str(run, "store")
		t, _ := str(run, "target")
		sub := chaosSubject{store: s, target: t}
		if t != "" && s != "" || t == "" && s == "" {
			a.chaosFail(sub, "runs", "%s: runs[%d]: store %q and target %q: a run is on one or the other", ChaosFile, i, s, t)
			continue
		}
		if t != "" {
			sub.trial = max(int(number(run["trial"])), 1)
			if prev := bySubject[chaosSubject{target: t, trial: sub.trial - 1}]; sub.trial > 1 && (prev == nil || notRun(prev) != "" || notRun(run) != "") {
				a.chaosFail(sub, "runs", "%s: runs[%d]: %s without a run of its trial %d before it", ChaosFile, i, sub, sub.trial-1)
				continue
			}
		}
		if _, dup := bySubject[sub]; dup {
			a.chaosFail(sub, "runs", "%s: runs[%d]: a second run of %s", ChaosFile, i, sub)
			continue
		}
		switch {
		case t != "" && sub.trial == 1:
			targets = append(targets, t)
		case t == "":
			if len(targets) > 0 {
				a.chaosFail(sub, "runs", "%s: runs[%d]: store %s after the targets' runs: stores come first", ChaosFile, i, s)
			}
			stores = append(stores, s)
		}
		bySubject[sub] = run
	}
	return stores, targets, bySubject
}

// checkChaosTrials checks that chaos ran on every target that ran in the
// trials manifest.flags records (runner -chaos-trials; evidence from
// before chaos trials ran once).
func (a *auditor) checkChaosTrials(targets []string, bySubject map[chaosSubject]map[string]any) {
	want, from := a.expected("chaos_trials", 1)
	for _, t := range targets {
		a.check()
		if notRun(bySubject[chaosSubject{target: t, trial: 1}]) != "" {
			continue
		}
		n := 1
		for bySubject[chaosSubject{target: t, trial: n + 1}] != nil {
			n++
		}
		if int64(n) != want {
			a.chaosFail(chaosSubject{target: t, trial: 1}, "runs", "%s: target %s: %s, expected %d (%s)", ChaosFile, t, plural(n, "trial"), want, from)
		}
	}
}

// checkChaosSelection checks the runs against the selection: the stores
// in store order, each store and target the selection names run (when it
// names none, as a chaos-only run writes it, the runs chaos.json lists),
// no store it does not name, and no chaos file without a run.
func (a *auditor) checkChaosSelection(runs int, stores, targets []string, bySubject map[chaosSubject]map[string]any) {
	a.check()
	if !slices.Equal(orderStores(stores), stores) {
		a.chaosFail(chaosSubject{}, "runs", "%s: runs: stores %s not in store order (%s)", ChaosFile, strings.Join(stores, ", "), strings.Join(StoreOrder, ", "))
	}
	wantStores, wantTargets := a.selStores, a.selTargets
	if len(wantStores) == 0 && len(wantTargets) == 0 {
		wantStores, wantTargets = stores, targets
		if runs == 0 {
			a.chaosFail(chaosSubject{}, "runs", "%s: runs: empty: the chaos experiment ran on no store and no target", ChaosFile)
		} else {
			a.note(fmt.Sprintf("chaos: manifest.json selects no stores and no targets (a chaos-only run): checked the runs %s lists: stores %s; targets %s",
				ChaosFile, orNone(stores), orNone(targets)))
		}
	}
	a.check()
	if len(wantTargets) > 0 && !slices.Equal(targets, wantTargets) {
		a.chaosFail(chaosSubject{}, "runs", "%s: runs: targets %s, expected the selection's targets in its order: %s", ChaosFile, orNone(targets), orNone(wantTargets))
	}
	for _, s := range wantStores {
		a.check()
		if bySubject[chaosSubject{store: s}] == nil {
			a.chaosFail(chaosSubject{store: s}, "runs", "%s: store %s: selected, but no chaos run", ChaosFile, s)
		}
	}
	for _, s := range stores {
		if !slices.Contains(wantStores, s) {
			a.chaosFail(chaosSubject{store: s}, "runs", "%s: store %s: a chaos run of a store manifest.json does not select", ChaosFile, s)
		}
	}
	for p := range a.listed {
		a.check()
		if sub, _, ok := subjectOf(p); ok && (bySubject[sub] == nil || notRun(bySubject[sub]) != "") {
			a.chaosFail(sub, "files", "file %s: a chaos file without a run of %s in %s", p, sub, ChaosFile)
		}
	}
}

// notRun is a target run's not_run, "" for a run that ran.
func notRun(run map[string]any) string {
	why, _ := str(run, "not_run")
	return why
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// checkChaosNotRun checks a target the experiment did not run on: one in
// the checkout (dir) whose target.json counts its effects itself, or is
// attached, must say so; one that counts them at the sink can have been
// skipped only for a missing program (its reason is checked as a target's
// skip is).
func (a *auditor) checkChaosNotRun(name, dir, why string) {
	var spec *chaosTarget
	if dir != "" {
		spec = a.chaosTargetSpec(chaosSubject{target: name}, dir)
	}
	a.check()
	switch {
	case strings.HasPrefix(why, "skipped: "):
		a.note(fmt.Sprintf("chaos: target %s was %s (a program missing on the runner's machine)", name, why))
	case spec == nil:
		a.note(fmt.Sprintf("chaos: target %s not run: %s (no target.json in the checkout to check it by)", name, why))
	case spec.attach && strings.HasPrefix(why, noProcessControl):
		a.note(fmt.Sprintf("chaos: target %s not run: %s (%s/target.json attaches to a running service)", name, why, dir))
	case !spec.sink && !spec.journal:
		a.note(fmt.Sprintf("chaos: target %s not run: it counts its effects itself and prints no journal (%s/target.json), and the experiment judges each intent by the journal of applied effects", name, dir))
	default:
		a.chaosFail(chaosSubject{target: name}, "not_run", "%s: target %s: not run (%s), but its target.json gives the journal of its effects (the sink's, or its own journal command), which the experiment judges by", ChaosFile, name, why)
	}
}

func mapOf(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

// checkChaosRun re-derives one run from its history and compares: what
// the header says against chaos.json, the claims, the parameters and the
// seed, the history's consistency with the plan, the rules the claims
// promise, and (a second pass over the file) the timeline.
func (a *auditor) checkChaosRun(sub chaosSubject, run map[string]any, crashCode int64) {
	name := sub.base() + ".jsonl"
	hist := a.readChaosRun(sub, name)
	if hist == nil {
		return
	}
	hist.trial = sub.trial
	a.checkChaosHeader(sub, name, run, hist)
	a.checkChaosClaims(sub, run, hist)
	c := hist.check(crashCode)
	a.checkChaosParams(sub, run, hist)
	a.checkSeed(CheckChaos, sub.store, ChaosFile, sub.String()+": ", run["seed"])
	params, capped := mapOf(run, "parameters"), mapOf(run, "capped")
	hist.checkConsistency(chaosRunParams{ // chaos_consistency.go
		durationMS: number(params["duration_ms"]), killEveryMS: number(params["kill_every_ms"]),
		maxAttempts: number(params["max_attempts"]), quietAttempts: number(params["quiet_attempts"]),
		cappedIntents: capped["intents"] == true, cappedAttmpt: capped["history"] == true,
	})
	a.reportChaosIssues(sub, name, hist.issues)
	a.claim("chaos_schedule")
	a.claim("chaos_history")
	a.judgeChaosRun(sub, name, hist, c)
	a.checkChaosReplay(sub, name, hist, c)
}

// readChaosRun reads sub's history, listed as name, and checks it is
// the file manifest.files hashed; nil if it cannot be read.
func (a *auditor) readChaosRun(sub chaosSubject, name string) *chaosHistory {
	a.check()
	if !a.isListed(name) {
		a.chaosFail(sub, "files", "file %s: the history of %s's chaos run: not listed in manifest.files", name, sub)
		return nil
	}
	f, err := openInside(a.opts.Evidence, name, CapHistory)
	if err != nil {
		return nil // reported by the file checks
	}
	h := sha256.New()
	hist, err := readChaosHistory(io.TeeReader(io.LimitReader(f, CapHistory+1), h))
	f.Close()
	if err != nil {
		a.chaosFail(sub, "history", "%s: %v", name, err)
		return nil
	}
	if hex.EncodeToString(h.Sum(nil)) != a.listed[name] && !slices.ContainsFunc(a.report.Failures, func(x Failure) bool {
		return x.Check == CheckFile && strings.HasPrefix(x.Message, "file "+name+":")
	}) {
		a.failf(CheckFile, "file %s: changed while being read", name)
	}
	return hist
}

// checkChaosHeader checks what chaos.json says of a run against its
// history's header (name's): the store or target, the seed, the
// parameters the schedule depends on, the fault kinds.
func (a *auditor) checkChaosHeader(sub chaosSubject, name string, run map[string]any, hist *chaosHistory) {
	a.check()
	if hist.store != sub.store || hist.target != sub.target {
		a.chaosFail(sub, "store", "%s: run header: store %q, target %q, expected %s", name, hist.store, hist.target, sub)
	}
	what := ChaosFile + ": " + sub.String()
	if seed := render(run["seed"]); seed != strconv.FormatUint(hist.seed, 10) {
		a.chaosFail(sub, "seed", "%s: seed: expected %d (the history's), observed %s", what, hist.seed, seed)
	}
	params := mapOf(run, "parameters")
	for _, p := range []param{{"replicas", int64(hist.replicas)}, {"clients", int64(hist.clients)}, {"duration_ms", hist.durationMS}, {"kill_every_ms", hist.killEveryMS}} {
		a.check()
		if got := number(params[p.name]); got != p.value {
			a.chaosFail(sub, "parameters."+p.name, "%s: parameters.%s: expected %d (the history's), observed %s", what, p.name, p.value, render(params[p.name]))
		}
	}
	a.check()
	if got := render(run["faults"]); got != render(toAny(hist.faultKinds)) {
		a.chaosFail(sub, "faults", "%s: faults: expected %s (the history's), observed %s", what, render(toAny(hist.faultKinds)), got)
	}
}

// judgeChaosRun reports every violation of a promised rule, named by
// intent: on the lab's own stores a failure of the evidence; on a target
// the target's result (a finding is what the target does, not a broken
// lab), which the verdict says.
func (a *auditor) judgeChaosRun(sub chaosSubject, name string, hist *chaosHistory, c chaosCheck) {
	a.claim("chaos_promises")
	a.claim("chaos_verdict")
	for _, rule := range chaosRules {
		if hist.promised(rule) && sub.target == "" {
			a.failPromised(sub, name, rule, c)
		}
	}
	v := chaosVerdictOf(sub, hist, c)
	a.chaosVerdicts = append(a.chaosVerdicts, v)
	if sub.target != "" {
		if sub.trial <= 1 {
			a.report.ChaosTargets = append(a.report.ChaosTargets, sub.target)
		}
		if v.Violations > 0 {
			a.note(fmt.Sprintf("chaos: target %s: %d findings its claims promise never to happen (%s): the target's result, judged from %s",
				sub.target, v.Violations, chaosClaimsText(hist.claims), name))
		}
	}
}

// failPromised reports the findings of rule, which the store promises
// never fire: at most maxChaosLines, and a count of the rest.
func (a *auditor) failPromised(sub chaosSubject, name, rule string, c chaosCheck) {
	fired := c.fired[rule]
	a.report.Checks += int(fired) // a check per finding, as when every one was printed
	var shown int
	for _, fd := range c.findings {
		if fd.rule != rule {
			continue
		}
		if shown++; shown > maxChaosLines {
			break
		}
		who := "the journal"
		if fd.intent >= 0 {
			who = fmt.Sprintf("intent %d (key %s)", fd.intent, fd.key)
		}
		a.chaosFail(sub, rule, "%s: %s promises no %s: %s: %s", name, sub, rule, who, fd.detail)
	}
	if fired > maxChaosLines {
		a.chaosFail(sub, rule, "%s: %s promises no %s: %d more", name, sub, rule, fired-maxChaosLines)
	}
}

// checkChaosClaims checks the claims a run was judged by: chaos.json's and
// the history's agree; a store's are the store's own; a target's are its
// target.json's where its folder is in the checkout (chaos.json's
// target_dir), and a target that claims no shared store ran one replica;
// and the fault kinds the schedule placed are those the store or target
// takes.
func (a *auditor) checkChaosClaims(sub chaosSubject, run map[string]any, hist *chaosHistory) {
	what := ChaosFile + ": " + sub.String()
	cl := mapOf(run, "claims")
	a.check()
	if d, sh := cl["durable"] == true, cl["shared_store"] == true; d != hist.claims.durable || sh != hist.claims.shared {
		a.chaosFail(sub, "claims", "%s: claims: durable %t, shared_store %t; the history's: %t, %t", what, d, sh, hist.claims.durable, hist.claims.shared)
	}
	dir, _ := str(run, "target_dir")
	want, wantFaults, by := hist.claims, chaosplan.StoreFaults, ""
	switch {
	case sub.store != "":
		want, by = storeClaims(sub.store), "the store's"
		if dir != "" {
			a.chaosFail(sub, "target_dir", "%s: target_dir %q on a store", what, dir)
		}
		a.checkSinkFired(sub, hist, nil) // chaosfired.go
	case dir != "":
		spec := a.chaosTargetSpec(sub, dir)
		if spec == nil {
			a.checkSinkFired(sub, hist, nil)
			break
		}
		a.checkSinkFired(sub, hist, spec.targetSpec)
		want, wantFaults, by = spec.claims, spec.faults, dir+"/target.json's"
		digest, _ := str(run, "target_digest")
		a.checkChaosDigest(sub, dir, digest)
		a.check()
		if !spec.sink && !spec.journal {
			a.chaosFail(sub, "target_dir", "%s: %s/target.json counts its effects itself and prints no journal: the experiment cannot have run on it", what, dir)
		}
	default:
		a.note(fmt.Sprintf("chaos: target %s is not in the checkout: its claims (%s) and fault kinds are the runner's word", sub.target, chaosClaimsText(hist.claims)))
		a.checkSinkFired(sub, hist, nil)
	}
	if by != "" {
		a.check()
		if want != hist.claims {
			a.chaosFail(sub, "claims", "%s: claims %s, expected %s: %s", what, chaosClaimsText(hist.claims), by, chaosClaimsText(want))
		}
		a.check()
		if !slices.Equal(hist.faultKinds, wantFaults) {
			a.chaosFail(sub, "faults", "%s: the schedule placed the fault kinds %s, expected %s (those %s takes)", what, orNone(hist.faultKinds), orNone(wantFaults), sub)
		}
	}
	a.check()
	if sub.target != "" && !hist.claims.shared && hist.replicas != 1 {
		a.chaosFail(sub, "parameters.replicas", "%s: %d replicas, but the target claims no shared store: one replica runs", what, hist.replicas)
	}
}

func chaosClaimsText(c chaosClaims) string {
	return fmt.Sprintf("durable %t, shared_store %t", c.durable, c.shared)
}

// checkChaosParams checks a run's parameters: each the design's
// (chaosParams), or what manifest.flags records for its knob (params.go).
// On a target the design's chaos phase is targetDurationMS (-duration
// sets it too), and a target that claims no shared store runs one replica
// whatever -replicas says.
func (a *auditor) checkChaosParams(sub chaosSubject, run map[string]any, hist *chaosHistory) {
	a.claim("params")
	params := mapOf(run, "parameters")
	for _, p := range chaosParams {
		a.check()
		def := p.value
		if sub.target != "" && p.name == "duration_ms" {
			def = targetDurationMS
		}
		want, src := a.expected(p.name, def)
		if sub.target != "" && p.name == "replicas" && !hist.claims.shared {
			want, src = 1, "a target that claims no shared store runs one replica"
		}
		if got := render(params[p.name]); got != fmt.Sprint(want) {
			a.fail(Failure{Check: CheckChaos, Store: sub.store, Target: sub.target, Field: "parameters." + p.name, Expected: fmt.Sprint(want), Observed: got,
				Message: fmt.Sprintf("%s: %s: parameters.%s: expected %d (%s), observed %s", ChaosFile, sub, p.name, want, src, got)})
		}
	}
}

// maxIssueLines bounds the consistency issues of one kind printed per
// history; the rest are counted in one more line.
const maxIssueLines = 3

// reportChaosIssues reports the history's consistency issues, at most
// maxIssueLines of each kind and a count of the rest.
func (a *auditor) reportChaosIssues(sub chaosSubject, name string, issues []chaosIssue) {
	for _, rule := range chaosIssueRules {
		a.check()
		var shown int
		for _, is := range issues {
			if is.rule != rule {
				continue
			}
			if shown++; shown <= maxIssueLines {
				a.chaosFail(sub, "history."+rule, "%s: %s", name, is.text)
			}
		}
		if shown > maxIssueLines {
			a.chaosFail(sub, "history."+rule, "%s: %d more like these (%s)", name, shown-maxIssueLines, rule)
		}
	}
}

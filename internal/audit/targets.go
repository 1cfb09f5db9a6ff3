package audit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// This file checks the runs on targets, services the lab did not write
// (docs/targets.md), against the selection, the manifest, each target's
// folder (targetfolder.go) and each case, then judges them
// (targetjudge.go) and renders TARGETS.md (targetsreport.go).

// The targets' evidence files.
const (
	TargetsFile       = "targets.json"
	TargetsReportFile = "TARGETS.md"
)

// targetView is one target as TARGETS.md shows it.
type targetView struct {
	name, summary string
	spec          *targetSpec
	libraries     []any // targets.json's {name, version} objects
	runtime       string
	skipped       string
	runs          []runView
}

// runView is one run on a target, or one case of a targetView: its
// verdict summed up over its trials, the calls of the trial that shows it,
// and every trial judged as a run (trials.go).
type runView struct {
	targetRunVerdict
	calls    []any     // targets.json's calls, as recorded
	unjudged bool      // its observations could not be judged (the failures say why)
	trials   []runView // a case's trials, each judged as a run; none on a run or a case that did not run
}

// checkTargets checks targets.json and manifest.targets and derives
// TARGETS.md; results (nil without) holds the runs a mirror is compared to.
func (a *auditor) checkTargets(results map[string]any) {
	mtargets, _ := a.manifest["targets"].([]any)
	a.check()
	if len(a.selTargets) == 0 {
		if a.isListed(TargetsFile) {
			a.failf(CheckRunSet, "manifest.json: selection.targets: empty, but manifest.files lists %s", TargetsFile)
		}
		if len(mtargets) > 0 {
			a.failf(CheckManifest, "manifest.json: targets: %d entries, but selection.targets is empty", len(mtargets))
		}
		return
	}
	a.report.Targets = append([]string{}, a.selTargets...)
	a.check()
	if names := namesOf(mtargets, "name"); !slices.Equal(names, a.selTargets) {
		a.fail(Failure{Check: CheckManifest, Field: "targets",
			Message: fmt.Sprintf("manifest.json: targets: expected one entry per selection.targets, in its order (%d), observed %d: %s",
				len(a.selTargets), len(names), firstDiffOf("targets", a.selTargets, names))})
	}
	doc, _ := a.jsonDoc(TargetsFile, a.schemas.Targets).(map[string]any)
	if doc == nil {
		a.note("targets.json is missing or invalid: the runs on targets were not checked")
		return
	}
	list, _ := doc["targets"].([]any)
	names := namesOf(list, "name")
	complete := slices.Equal(names, a.selTargets)
	a.check()
	if !complete {
		a.fail(Failure{Check: CheckTarget, Field: "targets",
			Message: fmt.Sprintf("targets.json: targets: expected the targets of manifest.json selection.targets, in its order (%d), observed %d: %s",
				len(a.selTargets), len(names), firstDiffOf("targets", a.selTargets, names))})
	}
	for i := range min(len(list), len(mtargets)) {
		tm, _ := list[i].(map[string]any)
		mm, _ := mtargets[i].(map[string]any)
		name, _ := str(tm, "name")
		if n, _ := str(mm, "name"); n != name {
			continue // reported above
		}
		for _, f := range []string{"dir", "digest", "libraries", "runtime", "skipped"} {
			a.check()
			if w, g := render(tm[f]), render(mm[f]); w != g {
				a.fail(Failure{Check: CheckManifest, Target: name, Field: "targets." + f, Expected: clipValue(w), Observed: clipValue(g),
					Message: fmt.Sprintf("manifest.json: targets[%d] (%s): %s: expected %s (targets.json), observed %s", i, name, f, clipValue(w), clipValue(g))})
			}
		}
	}

	var views []*targetView // nil for a target whose target.json cannot be read
	for i, tv := range list {
		if i < len(a.selTargets) && names[i] == a.selTargets[i] {
			tm, _ := tv.(map[string]any)
			views = append(views, a.checkTarget(tm, results))
		}
	}
	if len(a.outsideTargets) > 0 {
		a.report.Subset = append(a.report.Subset, "targets outside the checkout, not re-read: "+strings.Join(a.outsideTargets, ", "))
	}
	if a.report.TargetRuns > 0 {
		a.claim("targets")
		a.note("targets.json: a target's observations are not byte-identical from run to run (its races are its own): each run was checked against its case's steps, the sink's journal and the audit's own verdict, not against another run")
	}
	a.deriveTargetsReport(views, complete)
}

// namesOf returns member key of every object in list.
func namesOf(list []any, key string) []string {
	out := []string{}
	for _, v := range list {
		m, _ := v.(map[string]any)
		n, _ := str(m, key)
		out = append(out, n)
	}
	return out
}

// checkTarget checks one target of targets.json: its target.json, its
// folder and its runs. It returns the target as TARGETS.md shows it, nil
// when its target.json cannot be read.
func (a *auditor) checkTarget(tm map[string]any, results map[string]any) *targetView {
	name, _ := str(tm, "name")
	targetJSON, _ := str(tm, "target_json")
	a.check()
	spec, err := a.schemas.readTargetSpec([]byte(targetJSON))
	if err != nil {
		a.targetFail(CheckSchema, name, "target_json", "not a valid target.json: %v", err)
		return nil
	}
	if spec.name != name {
		a.targetFail(CheckTarget, name, "target_json", "names the target %q", spec.name)
	}
	v := &targetView{name: name, summary: spec.summary, spec: spec}
	v.libraries, _ = tm["libraries"].([]any)
	v.runtime, _ = str(tm, "runtime")
	v.skipped, _ = str(tm, "skipped")
	a.checkTargetFolder(name, tm, spec, []byte(targetJSON)) // targetfolder.go

	runs, _ := tm["runs"].([]any)
	needs := targetNeeds([]byte(targetJSON))
	if v.skipped != "" {
		a.report.TargetsSkipped++
		a.check()
		consistent := true
		if len(runs) > 0 {
			a.targetFail(CheckTarget, name, "runs", "%d, but the target was skipped (%s): a skipped target runs no case", len(runs), v.skipped)
			consistent = false
		}
		if len(v.libraries) > 0 || v.runtime != "" {
			a.targetFail(CheckTarget, name, "libraries, runtime", "%s, %q, but the target was skipped: its versions are not read", render(v.libraries), v.runtime)
			consistent = false
		}
		if consistent { // a skip the runs already refute is not judged by its reason too
			fail := func(format string, args ...any) { a.targetFail(CheckTarget, name, "skipped", format, args...) }
			a.skipReason("target "+name, v.skipped, needs, true, fail)
		}
		a.report.Subset = append(a.report.Subset, fmt.Sprintf("target %s skipped (%s)", name, v.skipped))
		a.note(fmt.Sprintf("target %s was skipped here (%s): none of its cases ran, and nothing about it can be proved from this folder", name, v.skipped))
		return v
	}
	if slices.ContainsFunc(runs, func(r any) bool { rm, _ := r.(map[string]any); return notRun(rm) == "" }) {
		a.programs.use(needs, "target "+name)
	}
	var want []string
	var cases []*Case // the cases with a record: all of selection.cases, or those with a trial in the slice
	for _, c := range a.selCases {
		if len(a.heldTrials(name, spec, c)) > 0 {
			want, cases = append(want, c.Name), append(cases, c)
		}
	}
	got := namesOf(runs, "case")
	a.check()
	if !slices.Equal(want, got) {
		of := "one per case of manifest.json selection.cases"
		if !a.slice.Whole() {
			of = fmt.Sprintf("one per case of manifest.json selection.cases with a trial in slice %s", a.slice)
		}
		a.targetFail(CheckTarget, name, "runs", "expected %s, in its order (%d), observed %d: %s",
			of, len(want), len(got), firstDiffOf("runs", want, got))
	}
	for i, r := range runs {
		rm, _ := r.(map[string]any)
		if i < len(cases) && cases[i].Name == got[i] {
			v.runs = append(v.runs, a.checkTargetCell(name, spec, cases[i], rm, results)) // trials.go
			continue
		}
		run := recordedRun(rm)
		run.unjudged = true
		v.runs = append(v.runs, run)
	}
	return v
}

// targetFail records a failed check of target name's field in targets.json.
func (a *auditor) targetFail(check Check, name, field, format string, args ...any) {
	a.fail(Failure{Check: check, Target: name, Field: field,
		Message: fmt.Sprintf("targets.json: target %s: %s: ", name, field) + fmt.Sprintf(format, args...)})
}

// recordedRun is a run as targets.json records it, not yet judged.
func recordedRun(rm map[string]any) runView {
	r := runView{}
	r.Case, _ = str(rm, "case")
	r.NotRun, _ = str(rm, "not_run")
	r.calls, _ = rm["calls"].([]any)
	return r
}

// checkTargetRun checks one run of case c on target tname (spec), its
// trial number trial (1-based), and judges it.
func (a *auditor) checkTargetRun(tname string, spec *targetSpec, c *Case, trial int, rm map[string]any, results map[string]any) runView {
	where := fmt.Sprintf("targets.json: target %s, case %s", tname, c.Name)
	if trial > 1 {
		where += fmt.Sprintf(", trial %d", trial)
	}
	fail := a.callFailer(Failure{Check: CheckTarget, Case: c.Name, Target: tname}, where)
	view := recordedRun(rm)
	if a.checkNotRun(c, spec, rm, &view, fail) {
		return view
	}
	a.report.TargetRuns++
	a.report.TargetCalls += len(view.calls)
	a.check()
	if rm["counter"] == nil || rm["detail"] == nil {
		fail(nil, "counter, detail", "a counter and details (the case ran)",
			render(rm["counter"])+", "+clipValue(render(rm["detail"])))
		view.unjudged = true
		return view
	}
	counter := number(rm["counter"])
	codes, _ := rm["exit_codes"].([]any)
	calls := make([]obsCall, len(view.calls))
	for i, x := range view.calls {
		calls[i] = readObsCall(x)
	}
	a.check()
	if len(calls) != len(c.Plan) {
		fail(nil, "calls", fmt.Sprintf("%d (as %s's steps send)", len(c.Plan), c.File), strconv.Itoa(len(calls)))
	}
	det, _ := rm["detail"].(map[string]any)
	shared := a.checkShared(tname, c, spec, det, fail)
	prefix := a.keyPrefix(spec, shared, det, fail)
	for i := range min(len(view.calls), len(c.Plan)) {
		call, _ := view.calls[i].(map[string]any)
		a.check()
		p := c.Plan[i]
		if p.Key != nil {
			p.Key = new(prefix + *p.Key)
		}
		p.Key = sentKey(p.Key, spec.keyFormat) // the key as the target's key format writes it
		checkSent(i, call, p, fail)
	}
	a.checkProcesses(c, spec, shared, codes, det, len(calls), fail)
	a.checkReplies(spec, a.checkJournal(spec, c, counter, det, fail), calls, fail)
	own, err := judgeTarget(c, spec, counter, calls, unforwarded(spec, c, det))
	if err != nil {
		fail(nil, "calls", "calls that line up with "+c.File+"'s steps, to be judged", err.Error())
		view.unjudged = true
		return view
	}
	view.targetRunVerdict = own
	if why := a.unfiredAtSink(spec, det, fail); why != "" {
		view.NotFired, view.NotFiredWhy = 1, why // faultsfired.go: not judged
	}
	if native := nativeRun(results, c.Name, spec.mirrors); native != nil {
		view.Mirror = mirrorDiffs(native, counter, codes, calls)
	} else if spec.mirrors != "" {
		if n := fmt.Sprintf("target %s mirrors the %s store, whose native runs are not in this folder: its runs were not compared with them", tname, spec.mirrors); !slices.Contains(a.report.Notes, n) {
			a.note(n)
		}
	}
	return view
}

// checkNotRun checks that run rm ran exactly when c can run on spec, and
// that a run that should not have run recorded nothing. It reports whether
// the run did not run (or should not have): view.NotRun then says why.
func (a *auditor) checkNotRun(c *Case, spec *targetSpec, rm map[string]any, view *runView, fail callFail) bool {
	want := targetNotRun(c, spec, a.protoInt("capacity"))
	a.check()
	if view.NotRun != want {
		what := "the case runs on this target"
		if want != "" {
			what = "the case cannot run on this target"
		}
		fail(nil, "not_run", fmt.Sprintf("%s (%s, by the audit's own reading of %s and target.json)", strconv.Quote(want), what, c.File), strconv.Quote(view.NotRun))
	}
	if want == "" && view.NotRun == "" {
		return false
	}
	a.report.TargetsNotRun++
	if want != "" {
		view.NotRun = want
		a.check()
		for _, f := range []struct{ field, empty string }{
			{"counter", "null"}, {"exit_codes", "[]"}, {"calls", "[]"}, {"detail", "null"},
		} {
			if g := render(rm[f.field]); g != f.empty {
				fail(nil, f.field, f.empty+" (a case that does not run has no observations)", g)
			}
		}
	}
	return true
}

// keyPrefix is what every key of a run on an attached target or a shared
// process began with (detail.key_prefix, which only such a run has), ""
// on any other. Two runs of a target with one prefix could answer each
// other's keys: a prefix is drawn for each run.
func (a *auditor) keyPrefix(spec *targetSpec, shared bool, det map[string]any, fail callFail) string {
	prefix, has := str(det, "key_prefix")
	a.check()
	switch {
	case spec.attach && !has:
		fail(nil, "detail.key_prefix", "a prefix unique to the run (the target is attached: its earlier keys must not answer)", "none")
	case shared && !has:
		fail(nil, "detail.key_prefix", "a prefix unique to the run (its process is shared: other runs' keys must not answer)", "none")
	case !spec.attach && !shared && has:
		fail(nil, "detail.key_prefix", "none (the lab starts this target: its keys are its run's)", strconv.Quote(prefix))
		return ""
	}
	return prefix
}

// checkShared checks a run on a shared process (detail.shared_process): by
// the audit's own reading of the case and target.json, the case needs no
// process of its own, and no other run of the target drew its key prefix.
// It reports whether the run was on a shared process.
func (a *auditor) checkShared(tname string, c *Case, spec *targetSpec, det map[string]any, fail callFail) bool {
	sp, shared := det["shared_process"].(map[string]any)
	if !shared {
		return false
	}
	a.check()
	if why := unshareable(c, spec); why != "" {
		fail(nil, "detail.shared_process", "none: the case needs a process of its own ("+why+")", "pid "+render(sp["pid"]))
	}
	if prefix, has := str(det, "key_prefix"); has {
		a.check()
		k := tname + "\x00" + prefix
		if a.prefixes == nil {
			a.prefixes = map[string]string{}
		}
		if prev, dup := a.prefixes[k]; dup {
			fail(nil, "detail.key_prefix", "a prefix no other run of the target drew", strconv.Quote(prefix)+", "+prev+"'s too")
		}
		a.prefixes[k] = c.Name
	}
	return true
}

// unshareable says why case c may not run on a process of target spec
// that other runs share ("" when it may): the audit's reading of
// caserun.Shareable. A shared process is started by the lab, calls the
// sink, and holds no bounded store that other runs' keys would fill; the
// case runs one replica, one process, no crash, no capacity and no TTL of
// its own.
func unshareable(c *Case, spec *targetSpec) string {
	switch {
	case spec.attach:
		return "the target is attached"
	case !spec.sink:
		return "the target counts its own effects"
	case spec.capacity != nil:
		return "the target claims a capacity"
	case c.Replicas > 1:
		return fmt.Sprintf("%d replicas", c.Replicas)
	case c.LosesProcess || c.Lifetimes != 1:
		return "its steps restart, stop or crash a process"
	case c.Capacity != 0:
		return "a capacity of its own"
	case c.KeyTTL != 0:
		return "a key TTL"
	}
	return ""
}

// checkProcesses checks a run's processes: one per process the steps
// start (none on an attached target or a shared process), each exit code
// as recorded, and a detail per call.
func (a *auditor) checkProcesses(c *Case, spec *targetSpec, shared bool, codes []any, det map[string]any, calls int, fail callFail) {
	a.check()
	lifetimes, started := c.Lifetimes, "one per process "+c.File+"'s steps start"
	switch {
	case spec.attach:
		lifetimes, started = 0, "none: the target is attached, its user started it"
	case shared:
		lifetimes, started = 0, "none: the run shared a process (detail.shared_process)"
	}
	if len(codes) != lifetimes {
		fail(nil, "exit_codes", fmt.Sprintf("%d codes (%s)", lifetimes, started), strconv.Itoa(len(codes)))
	}
	procs, _ := det["processes"].([]any)
	procCodes := []any{}
	for _, p := range procs {
		pm, _ := p.(map[string]any)
		procCodes = append(procCodes, pm["exit_code"])
	}
	if render(procCodes) != render(codes) {
		fail(nil, "detail.processes", render(codes)+" (exit_codes)", render(procCodes)+" (their exit codes)")
	}
	if dc, _ := det["calls"].([]any); len(dc) != calls {
		fail(nil, "detail.calls", fmt.Sprintf("%d (one per call)", calls), strconv.Itoa(len(dc)))
	}
}

// nativeRun returns results.json's run of case on store, nil without one.
func nativeRun(results map[string]any, cname, store string) map[string]any {
	if results == nil || store == "" {
		return nil
	}
	runs, _ := results["runs"].([]any)
	for _, r := range runs {
		if runKeyOf(r) == (runKey{cname, store}) {
			return r.(map[string]any)
		}
	}
	return nil
}

// checkJournal checks a run's effect journal: for a target whose effects
// the sink counts, its effects applied (the entries not replays) as many as
// the counter and numbered 1..n in order, each replay numbered as an effect
// applied before it under the same forwarded key (not empty) with the same
// body, every entry from a replica the case runs and with the SHA-256 of a
// body one of the run's calls sent; for a target that counts its own, none.
// It returns the effects the journal applied.
func (a *auditor) checkJournal(spec *targetSpec, c *Case, counter int64, det map[string]any, fail callFail) int64 {
	journal, _ := det["journal"].([]any)
	a.check()
	if !spec.sink {
		if len(journal) > 0 {
			fail(nil, "detail.journal", "[] (the target counts its effects itself: no sink took part)", fmt.Sprintf("%d entries", len(journal)))
		}
		return 0
	}
	sent := map[string]bool{}
	for _, p := range c.Plan {
		sent[sha256Hex(p.Body())] = true
	}
	type effect struct{ key, body string }
	var applied []effect // by seq - 1
	for j, e := range journal {
		em, _ := e.(map[string]any)
		at := fmt.Sprintf("detail.journal[%d]", j)
		key, body := opt[string](em["key"]), render(em["body_sha256"])
		a.check()
		switch seq := number(em["seq"]); {
		case em["replayed"] != true:
			applied = append(applied, effect{deref(key), body})
			if seq != int64(len(applied)) {
				fail(nil, at+".seq", strconv.Itoa(len(applied))+" (the sink numbers its effects 1, 2, ...)", render(em["seq"]))
			}
		case seq < 1 || seq > int64(len(applied)):
			fail(nil, at+".seq", fmt.Sprintf("an effect applied before this replay (1..%d)", len(applied)), render(em["seq"]))
		case deref(key) == "" || applied[seq-1] != effect{*key, body}:
			fail(nil, at, fmt.Sprintf("a replay under effect %d's forwarded key %s and body", seq, strconv.Quote(applied[seq-1].key)),
				fmt.Sprintf("key %s, body_sha256 %s", render(em["key"]), body))
		}
		if sum, _ := str(em, "body_sha256"); !sent[sum] {
			a.noteForeignBody(spec.name)
		}
		if r := number(em["replica"]); r >= int64(c.Replicas) {
			fail(nil, at+".replica", fmt.Sprintf("below %d (the replicas the case runs)", c.Replicas), render(em["replica"]))
		}
	}
	if int64(len(applied)) != counter { // counted with the journal's first check
		fail(nil, "counter", fmt.Sprintf("%d (the effects in the sink's journal)", len(applied)), strconv.FormatInt(counter, 10))
	}
	return int64(len(applied))
}

// noteForeignBody notes, once per target, that it sent the sink a body
// none of its clients sent. That breaks the sink's contract, not the
// evidence: the effects are counted all the same, but a fault armed at the
// sink for the client's body cannot fire, and the cases placing one are not
// judged (faultsfired.go).
func (a *auditor) noteForeignBody(target string) {
	n := fmt.Sprintf("target %s sent the effect sink a body none of its clients sent (the sink's contract asks for the intent's request body): "+
		"its effects are counted all the same, but a fault armed at the sink for the client's body cannot fire there, and a case that places one is not judged", target)
	if !slices.Contains(a.report.Notes, n) {
		a.note(n)
	}
}

// checkReplies checks what the calls say the target answered against what
// the run shows it could: on a target whose effects the sink counts, a
// success's body is the value of an effect in the sink's journal (1 to
// applied, the effects it applied: the sink's contract has the target
// answer with it; anything else is a refusal, with its own status); and a
// target that names no replay marker has no call marked or unmarked as a
// replay.
func (a *auditor) checkReplies(spec *targetSpec, applied int64, calls []obsCall, fail callFail) {
	for i, o := range calls {
		a.check()
		if spec.sink && o.succeeded() {
			if v, err := strconv.ParseInt(deref(o.body), 10, 64); err != nil || v < 1 || v > applied || strconv.FormatInt(v, 10) != deref(o.body) {
				fail(&i, "body", fmt.Sprintf("the value of an effect in the sink's journal (1..%d): the target answers a success with the sink's value", applied), bodyText(o.body))
			}
		}
		if spec.replay == nil && o.replayed != nil {
			fail(&i, "replayed", "null (the target names no replay marker: the lab reads none)", strconv.FormatBool(*o.replayed))
		}
	}
}

// unforwarded reports whether a sink journal that could hold forwarded
// keys (c.SinkKeys) has entries and none carries a key.
func unforwarded(spec *targetSpec, c *Case, det map[string]any) bool {
	journal, _ := det["journal"].([]any)
	return spec.sink && c.SinkKeys && len(journal) > 0 && !slices.ContainsFunc(journal, func(e any) bool {
		em, _ := e.(map[string]any)
		k, _ := em["key"].(string)
		return k != ""
	})
}

// deriveTargetsReport records every target's verdicts and writes
// TARGETS.md, unless a target or run could not be read or judged.
func (a *auditor) deriveTargetsReport(views []*targetView, complete bool) {
	if !a.slice.Whole() {
		return // a slice is judged once merged
	}
	for _, v := range views {
		complete = complete && v != nil && !slices.ContainsFunc(v.runs, func(r runView) bool { return !r.judged() })
	}
	if !complete {
		a.note("TARGETS.md not derived: a target of targets.json could not be read or judged, or the targets do not line up with the selection")
		return
	}
	for _, v := range views {
		a.targetVerdicts = append(a.targetVerdicts, targetVerdictOf(v))
	}
	a.claim("targets_report")
	a.emit(TargetsReportFile, targetsReport(views))
	a.emit(MatrixFile, matrixReport(views, a.allCases))
	a.emit(MatrixSVGFile, matrixSVG(views, a.allCases))
}

// What a skip says and what the other runs show: the runner skips a
// target (or a chaos run on one) only for a program missing on its
// machine, and says which (internal/runner's missing: "P, Q not found
// (what to install)", "PostgreSQL not at hand (...)", joined by "; ").
// Every run of one evidence folder ran on one machine, so a program a
// skip says was missing cannot be one another run of the folder used.

// programUses are the programs the runs of the evidence used, each with
// the first run that did, and the skips with the programs they lacked.
type programUses struct {
	used  map[string]string
	skips []programSkip
}

// programSkip is one skip: who, the programs it says were missing, and
// how to fail it.
type programSkip struct {
	what, reason string
	progs        []string
	fail         func(format string, args ...any)
}

// use records that run what used the programs progs.
func (p *programUses) use(progs []string, what string) {
	if p.used == nil {
		p.used = map[string]string{}
	}
	for _, prog := range progs {
		if _, ok := p.used[prog]; !ok {
			p.used[prog] = what
		}
	}
}

// postgresProgram stands for PostgreSQL in a skip reason and a target's
// services.
const postgresProgram = "PostgreSQL"

// targetNeeds are the programs a target.json says its runs need: those it
// requires, redis-server for the redis service, PostgreSQL for postgres.
// nil when the bytes are not a JSON object.
func targetNeeds(targetJSON []byte) []string {
	v, err := decodeJSON(targetJSON, capTargetJSON)
	doc, _ := v.(map[string]any)
	if err != nil || doc == nil {
		return nil
	}
	needs := stringList(doc, "requires")
	for _, s := range stringList(doc, "services") {
		p := map[string]string{"redis": "redis-server", "postgres": postgresProgram}[s]
		if p != "" && !slices.Contains(needs, p) {
			needs = append(needs, p)
		}
	}
	return needs
}

// skipReason reads the reason of what's skip: the programs it says were
// missing, recorded for checkSkips. It fails a reason that is not the
// runner's form, or (known: the target.json is at hand, needs its
// programs) names a program the target does not need.
func (a *auditor) skipReason(what, reason string, needs []string, known bool, fail func(format string, args ...any)) {
	a.check()
	var progs []string
	for _, part := range strings.Split(reason, "; ") {
		before, _, found := strings.Cut(part, " not found (")
		switch {
		case strings.HasPrefix(part, postgresProgram+" not at hand (") && strings.HasSuffix(part, ")"):
			progs = append(progs, postgresProgram)
		case found && before != "" && strings.HasSuffix(part, ")"):
			progs = append(progs, strings.Split(before, ", ")...)
		default:
			fail("%q is not a reason the runner gives: a target is skipped only for a program missing on the runner's machine, which the reason names (\"P, Q not found (what to install)\", \"PostgreSQL not at hand (...)\")", reason)
			return
		}
	}
	for _, p := range progs {
		if known && !slices.Contains(needs, p) {
			fail("%q names %s, which the target's target.json does not need (it needs %s): the skip is not the runner's", reason, p, orNone(needs))
			return
		}
	}
	a.programs.skips = append(a.programs.skips, programSkip{what: what, progs: progs, reason: reason, fail: fail})
}

// checkSkips checks every skip of the evidence, of a target in
// targets.json or of a chaos run on one in chaos.json, against the
// programs the other runs used: a program one run used was not missing
// for another. It runs after the targets' checks and before the
// experiments' (chaos.json's bytes are still held).
func (a *auditor) checkSkips() {
	if slices.Contains(a.selStores, "postgres") {
		a.programs.use([]string{postgresProgram}, "the runs on the postgres store")
	}
	a.chaosPrograms()
	for _, s := range a.programs.skips {
		for _, p := range s.progs {
			a.check()
			if by, ok := a.programs.used[p]; ok {
				s.fail("%q, but %s in the same evidence ran with %s: it was not missing on the runner's machine", s.reason, by, p)
				break
			}
		}
	}
}

// chaosPrograms records the programs chaos.json's runs used and the
// skips of its runs on targets (their target.json read from the
// checkout, where the run names its folder).
func (a *auditor) chaosPrograms() {
	data, ok := a.data[ChaosFile]
	if !ok {
		return
	}
	v, err := decodeJSON(data, jsonCaps[ChaosFile])
	doc, _ := v.(map[string]any)
	if err != nil || doc == nil {
		return // the chaos checks say why
	}
	runs, _ := doc["runs"].([]any)
	for _, r := range runs {
		run, _ := r.(map[string]any)
		store, _ := str(run, "store")
		name, _ := str(run, "target")
		why := notRun(run)
		if name == "" {
			if store == "postgres" && why == "" {
				a.programs.use([]string{postgresProgram}, "the chaos run on the postgres store")
			}
			continue // a run on a store, or on neither: the chaos checks say why
		}
		var needs []string
		if dir, _ := str(run, "target_dir"); cleanRel(dir) {
			if tj, err := readInside(a.opts.Root, dir+"/target.json", CapTargetFile); err == nil {
				needs = targetNeeds(tj)
			}
		}
		known := needs != nil
		what := "the chaos run on target " + name
		switch reason, skipped := strings.CutPrefix(why, "skipped: "); {
		case why == "":
			a.programs.use(needs, what)
		case skipped:
			a.report.Subset = append(a.report.Subset, fmt.Sprintf("chaos on target %s skipped (%s)", name, reason))
			sub := chaosSubject{target: name}
			fail := func(format string, args ...any) {
				a.chaosFail(sub, "not_run", "%s: target %s: not_run: "+format, append([]any{ChaosFile, name}, args...)...)
			}
			a.skipReason(what, reason, needs, known, fail)
		}
	}
}

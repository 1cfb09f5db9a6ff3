package audit

import (
	"fmt"
	"slices"
	"strconv"
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

// runView is one run of a targetView: its verdict and its calls.
type runView struct {
	targetRunVerdict
	calls    []any // targets.json's calls, as recorded
	unjudged bool  // its observations could not be judged (the failures say why)
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
	a.check()
	if !slices.Equal(names, a.selTargets) {
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

	var views []*targetView
	complete := slices.Equal(names, a.selTargets)
	for i, tv := range list {
		tm, _ := tv.(map[string]any)
		if i >= len(a.selTargets) || names[i] != a.selTargets[i] {
			continue
		}
		view := a.checkTarget(tm, results)
		complete = complete && view != nil
		views = append(views, view)
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
	if v.skipped != "" {
		a.report.TargetsSkipped++
		a.check()
		if len(runs) > 0 {
			a.targetFail(CheckTarget, name, "runs", "%d, but the target was skipped (%s): a skipped target runs no case", len(runs), v.skipped)
		}
		if len(v.libraries) > 0 || v.runtime != "" {
			a.targetFail(CheckTarget, name, "libraries, runtime", "%s, %q, but the target was skipped: its versions are not read", render(v.libraries), v.runtime)
		}
		a.note(fmt.Sprintf("target %s was skipped here (%s): none of its cases ran, and nothing about it can be proved from this folder", name, v.skipped))
		return v
	}
	var want []string
	for _, c := range a.selCases {
		want = append(want, c.Name)
	}
	got := namesOf(runs, "case")
	a.check()
	if !slices.Equal(want, got) {
		a.targetFail(CheckTarget, name, "runs", "expected one per case of manifest.json selection.cases, in its order (%d), observed %d: %s",
			len(want), len(got), firstDiffOf("runs", want, got))
	}
	for i, r := range runs {
		rm, _ := r.(map[string]any)
		if i < len(a.selCases) && a.selCases[i].Name == got[i] {
			v.runs = append(v.runs, a.checkTargetRun(name, spec, a.selCases[i], rm, results))
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

// checkTargetRun checks one run of case c on target tname (spec) and
// judges it; it returns the run as TARGETS.md shows it.
func (a *auditor) checkTargetRun(tname string, spec *targetSpec, c *Case, rm map[string]any, results map[string]any) runView {
	fail := a.callFailer(Failure{Check: CheckTarget, Case: c.Name, Target: tname}, fmt.Sprintf("targets.json: target %s, case %s", tname, c.Name))
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
	prefix := a.keyPrefix(spec, det, fail)
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
	a.checkProcesses(c, spec, codes, det, len(calls), fail)
	a.checkJournal(spec, c, counter, det, fail)
	own, err := judgeTarget(c, spec, counter, calls, unforwarded(spec, c, det))
	if err != nil {
		fail(nil, "calls", "calls that line up with "+c.File+"'s steps, to be judged", err.Error())
		view.unjudged = true
		return view
	}
	view.targetRunVerdict = own
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

// keyPrefix is what every key of a run on an attached target began with
// (detail.key_prefix, which only such a run has), "" on any other.
func (a *auditor) keyPrefix(spec *targetSpec, det map[string]any, fail callFail) string {
	prefix, has := str(det, "key_prefix")
	a.check()
	switch {
	case spec.attach && !has:
		fail(nil, "detail.key_prefix", "a prefix unique to the run (the target is attached: its earlier keys must not answer)", "none")
	case !spec.attach && has:
		fail(nil, "detail.key_prefix", "none (the lab starts this target: its keys are its run's)", strconv.Quote(prefix))
		return ""
	}
	return prefix
}

// checkProcesses checks a run's processes: one per process the steps
// start (none on an attached target), each exit code as recorded, and a
// detail per call.
func (a *auditor) checkProcesses(c *Case, spec *targetSpec, codes []any, det map[string]any, calls int, fail callFail) {
	a.check()
	lifetimes, started := c.Lifetimes, "one per process "+c.File+"'s steps start"
	if spec.attach {
		lifetimes, started = 0, "none: the target is attached, its user started it"
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
func (a *auditor) checkJournal(spec *targetSpec, c *Case, counter int64, det map[string]any, fail callFail) {
	journal, _ := det["journal"].([]any)
	a.check()
	if !spec.sink {
		if len(journal) > 0 {
			fail(nil, "detail.journal", "[] (the target counts its effects itself: no sink took part)", fmt.Sprintf("%d entries", len(journal)))
		}
		return
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
		key, body := optString(em["key"]), render(em["body_sha256"])
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
			fail(nil, at+".body_sha256", "the SHA-256 of a body one of the run's calls sent", strconv.Quote(sum))
		}
		if r := number(em["replica"]); r >= int64(c.Replicas) {
			fail(nil, at+".replica", fmt.Sprintf("below %d (the replicas the case runs)", c.Replicas), render(em["replica"]))
		}
	}
	if int64(len(applied)) != counter { // counted with the journal's first check
		fail(nil, "counter", fmt.Sprintf("%d (the effects in the sink's journal)", len(applied)), strconv.FormatInt(counter, 10))
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
	for _, v := range views {
		complete = complete && v != nil && !slices.ContainsFunc(v.runs, func(r runView) bool { return r.unjudged })
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

package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
)

// This file checks the runs on targets, services the lab did not write
// (docs/targets.md): targets.json against the selection and the manifest,
// each target's folder in the checkout (target.json byte for byte, the
// folder's digest, the library versions of its lock file: targetfolder.go),
// and each run against its case: whether it should run at all, its calls
// against the case's steps, the sink's journal against its counter and
// the bodies the calls sent, its verdict against the audit's own judge
// (targetjudge.go), and, for the lab's own server as a target, its
// differences from the native run. TARGETS.md is then rendered again
// (targetsreport.go) and compared byte for byte.

// The targets' evidence files.
const (
	TargetsFile       = "targets.json"
	TargetsReportFile = "TARGETS.md"
)

// targetView is one target as TARGETS.md shows it, from targets.json with
// what the audit derived itself in place of what it re-derived.
type targetView struct {
	name, summary string
	spec          *targetSpec
	libraries     []any // targets.json's {name, version} objects
	runtime       string
	skipped       string
	runs          []runView
}

// runView is one run of a targetView.
type runView struct {
	caseName string
	notRun   string
	verdict  tVerdict
	mirror   []string
	calls    []any // targets.json's calls, as recorded
}

// checkTargets checks targets.json, manifest.targets and TARGETS.md
// against the selection, the checkout, the case files and results (the
// decoded results.json, nil where there is none: the native runs a
// mirroring target is compared with).
func (a *auditor) checkTargets(results map[string]any) {
	mtargets, _ := a.manifest["targets"].([]any)
	a.check()
	if len(a.selTargets) == 0 {
		for _, f := range []string{TargetsFile, TargetsReportFile} {
			if a.isListed(f) {
				a.failf(CheckRunSet, "manifest.json: selection.targets: empty, but manifest.files lists %s", f)
			}
		}
		if len(mtargets) > 0 {
			a.failf(CheckManifest, "manifest.json: targets: %d entries, but selection.targets is empty", len(mtargets))
		}
		return
	}
	a.report.Targets = append([]string{}, a.selTargets...)
	a.check()
	if names := targetNames(mtargets); !slices.Equal(names, a.selTargets) {
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
	names := targetNames(list)
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
	a.checkTargetsReport(views, complete)
}

// targetNames returns the name of every object in list.
func targetNames(list []any) []string {
	out := []string{}
	for _, v := range list {
		m, _ := v.(map[string]any)
		n, _ := str(m, "name")
		out = append(out, n)
	}
	return out
}

// checkTarget checks one schema-valid target of targets.json: its
// target.json, its folder where it is in the checkout, and its runs. It
// returns the target as TARGETS.md must show it, nil when its target.json
// cannot be read (nothing of it can be judged).
func (a *auditor) checkTarget(tm map[string]any, results map[string]any) *targetView {
	name, _ := str(tm, "name")
	fail := func(check Check, field, format string, args ...any) {
		a.fail(Failure{Check: check, Target: name, Field: field,
			Message: fmt.Sprintf("targets.json: target %s: %s: ", name, field) + fmt.Sprintf(format, args...)})
	}
	targetJSON, _ := str(tm, "target_json")
	a.check()
	spec, err := a.schemas.readTargetSpec([]byte(targetJSON))
	if err != nil {
		fail(CheckSchema, "target_json", "not a valid target.json: %v", err)
		return nil
	}
	if spec.name != name {
		fail(CheckTarget, "target_json", "names the target %q", spec.name)
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
			fail(CheckTarget, "runs", "%d, but the target was skipped (%s): a skipped target runs no case", len(runs), v.skipped)
		}
		if len(v.libraries) > 0 || v.runtime != "" {
			fail(CheckTarget, "libraries, runtime", "%s, %q, but the target was skipped: its versions are not read", render(v.libraries), v.runtime)
		}
		a.note(fmt.Sprintf("target %s was skipped here (%s): none of its cases ran, and nothing about it can be proved from this folder", name, v.skipped))
		return v
	}
	var want []string
	for _, c := range a.selCases {
		want = append(want, c.Name)
	}
	got := make([]string, len(runs))
	for i, r := range runs {
		rm, _ := r.(map[string]any)
		got[i], _ = str(rm, "case")
	}
	a.check()
	if !slices.Equal(want, got) {
		fail(CheckTarget, "runs", "expected one per case of manifest.json selection.cases, in its order (%d), observed %d: %s",
			len(want), len(got), firstDiffOf("runs", want, got))
	}
	for i, r := range runs {
		rm, _ := r.(map[string]any)
		var c *Case
		if i < len(a.selCases) && a.selCases[i].Name == got[i] {
			c = a.selCases[i]
		}
		if c != nil && slices.Contains(a.cases, c) {
			v.runs = append(v.runs, a.checkTargetRun(name, spec, c, rm, results))
		} else {
			v.runs = append(v.runs, recordedRun(rm))
		}
	}
	return v
}

// recordedRun is a run as targets.json records it, for a run the audit
// did not judge (not checked in depth, or not lined up with a case).
func recordedRun(rm map[string]any) runView {
	r := runView{}
	r.caseName, _ = str(rm, "case")
	r.notRun, _ = str(rm, "not_run")
	r.calls, _ = rm["calls"].([]any)
	if vm, ok := rm["verdict"].(map[string]any); ok {
		r.verdict = readVerdict(vm)
	}
	r.mirror = stringList(rm, "mirror")
	return r
}

// readVerdict reads a schema-valid verdict of targets.json.
func readVerdict(vm map[string]any) tVerdict {
	v := tVerdict{effects: number(vm["effects"]), soundEffects: number(vm["sound_effects"])}
	v.safety, _ = str(vm, "safety")
	read := func(field string) []tFinding {
		var out []tFinding
		list, _ := vm[field].([]any)
		for _, x := range list {
			fm, _ := x.(map[string]any)
			f := tFinding{call: -1}
			f.rule, _ = str(fm, "rule")
			f.detail, _ = str(fm, "detail")
			f.limitation, _ = str(fm, "limitation")
			if fm["call"] != nil {
				f.call = int(number(fm["call"]))
			}
			out = append(out, f)
		}
		return out
	}
	v.findings, v.deviations = read("findings"), read("deviations")
	return v
}

// checkTargetRun checks one run of case c on target tname (spec): that it
// ran exactly when the case can run there, and for a run its calls,
// processes, journal, verdict and mirror. It returns the run as TARGETS.md
// must show it.
func (a *auditor) checkTargetRun(tname string, spec *targetSpec, c *Case, rm map[string]any, results map[string]any) runView {
	where := fmt.Sprintf("targets.json: target %s, case %s", tname, c.Name)
	fail := func(call *int, field, expected, observed string) {
		expected, observed = clipValue(expected), clipValue(observed)
		at := where
		if call != nil {
			at = fmt.Sprintf("%s, call %d", where, *call)
		}
		a.fail(Failure{Check: CheckTarget, Case: c.Name, Target: tname, Call: call, Field: field, Expected: expected, Observed: observed,
			Message: fmt.Sprintf("%s: %s: expected %s, observed %s", at, field, expected, observed)})
	}
	view := recordedRun(rm)
	want := targetNotRun(c, spec, a.protoInt("capacity"))
	a.check()
	if view.notRun != want {
		what := "the case runs on this target"
		if want != "" {
			what = "the case cannot run on this target"
		}
		fail(nil, "not_run", fmt.Sprintf("%s (%s, by the audit's own reading of %s and target.json)", strconv.Quote(want), what, c.File), strconv.Quote(view.notRun))
	}
	if want != "" || view.notRun != "" {
		a.report.TargetsNotRun++
		if want != "" {
			view.notRun = want
			a.check()
			for _, f := range []struct{ field, empty string }{
				{"counter", "null"}, {"exit_codes", "[]"}, {"calls", "[]"}, {"verdict", "null"}, {"mirror", "null"}, {"detail", "null"},
			} {
				if g := render(rm[f.field]); g != f.empty {
					fail(nil, f.field, f.empty+" (a case that does not run has no observations)", g)
				}
			}
		}
		return view
	}
	a.report.TargetRuns++
	a.report.TargetCalls += len(view.calls)

	a.check()
	if rm["counter"] == nil || rm["verdict"] == nil || rm["detail"] == nil {
		fail(nil, "counter, verdict, detail", "a counter, a verdict and details (the case ran)",
			render(rm["counter"])+", "+clipValue(render(rm["verdict"]))+", "+clipValue(render(rm["detail"])))
		return view
	}
	counter := number(rm["counter"])
	codes, _ := rm["exit_codes"].([]any)
	calls := make([]obsCall, len(view.calls))
	for i, x := range view.calls {
		calls[i] = readObsCall(x)
	}

	// The calls against the case's steps, as results.json's rules say.
	a.check()
	if len(calls) != len(c.Plan) {
		fail(nil, "calls", fmt.Sprintf("%d (as %s's steps send)", len(c.Plan), c.File), strconv.Itoa(len(calls)))
	}
	for i := range min(len(view.calls), len(c.Plan)) {
		call, _ := view.calls[i].(map[string]any)
		p := c.Plan[i]
		a.check()
		for _, f := range []struct {
			name string
			want any
		}{{"step", jsonNum(strconv.Itoa(p.Step))}, {"key", strPtr(p.Key)}, {"fault", strPtr(p.Fault)}, {"replica", replicaField(p.Replica)}} {
			if w, g := render(f.want), render(call[f.name]); w != g {
				fail(&i, f.name, w+" (as the case's steps send)", g)
			}
		}
	}

	// The processes: one per process the steps start, each exit code as
	// recorded.
	det, _ := rm["detail"].(map[string]any)
	a.check()
	if len(codes) != c.Lifetimes {
		fail(nil, "exit_codes", fmt.Sprintf("%d codes (one per process %s's steps start)", c.Lifetimes, c.File), strconv.Itoa(len(codes)))
	}
	procs, _ := det["processes"].([]any)
	var procCodes []any
	for _, p := range procs {
		pm, _ := p.(map[string]any)
		procCodes = append(procCodes, pm["exit_code"])
	}
	if procCodes == nil {
		procCodes = []any{}
	}
	if render(procCodes) != render(codes) {
		fail(nil, "detail.processes", render(codes)+" (exit_codes)", render(procCodes)+" (their exit codes)")
	}
	if dc, _ := det["calls"].([]any); len(dc) != len(calls) {
		fail(nil, "detail.calls", fmt.Sprintf("%d (one per call)", len(calls)), strconv.Itoa(len(dc)))
	}
	a.checkJournal(spec, c, counter, det, fail)

	// The verdict, judged again.
	if own, err := judgeTarget(c, spec, counter, calls); err != nil {
		a.note(fmt.Sprintf("target %s, case %s: verdict not re-derived: %v", tname, c.Name, err))
	} else {
		a.compareVerdict(own, view.verdict, fail)
		view.verdict = own
	}

	// The lab's own server as a target: its differences from the native run.
	a.check()
	var wantMirror []string
	if native := nativeRun(results, c.Name, spec.mirrors); native != nil {
		wantMirror = mirrorDiffs(native, counter, codes, calls)
	} else if spec.mirrors != "" {
		a.noteOnce(fmt.Sprintf("target %s mirrors the %s store, whose native runs are not in this folder: its mirror lists were not re-derived", tname, spec.mirrors))
	}
	if render(toAny(view.mirror)) != render(toAny(wantMirror)) { // null and [] both say: no difference
		w := "null (no differences)"
		if len(wantMirror) > 0 {
			w = render(toAny(wantMirror)) + " (the audit's own comparison with the native " + spec.mirrors + " run)"
		}
		fail(nil, "mirror", w, render(rm["mirror"]))
	}
	view.mirror = wantMirror
	return view
}

// nativeRun returns results.json's run of case on store, nil when there is
// none (or no store).
func nativeRun(results map[string]any, cname, store string) map[string]any {
	if results == nil || store == "" {
		return nil
	}
	runs, _ := results["runs"].([]any)
	for _, r := range runs {
		rm, _ := r.(map[string]any)
		if c, _ := str(rm, "case"); c == cname {
			if s, _ := str(rm, "store"); s == store {
				return rm
			}
		}
	}
	return nil
}

// checkJournal checks a run's effect journal: for a target whose effects
// the sink counts, as many entries as the counter, numbered 1..n, each
// from a replica the case runs and with the SHA-256 of a body one of the
// run's calls sent; for a target that counts its own, none.
func (a *auditor) checkJournal(spec *targetSpec, c *Case, counter int64, det map[string]any, fail func(*int, string, string, string)) {
	journal, _ := det["journal"].([]any)
	a.check()
	if !spec.sink {
		if len(journal) > 0 {
			fail(nil, "detail.journal", "[] (the target counts its effects itself: no sink took part)", fmt.Sprintf("%d entries", len(journal)))
		}
		return
	}
	if int64(len(journal)) != counter {
		fail(nil, "counter", fmt.Sprintf("%d (the effects in the sink's journal)", len(journal)), strconv.FormatInt(counter, 10))
	}
	sent := map[string]bool{}
	for _, p := range c.Plan {
		sum := sha256.Sum256(p.Body())
		sent[hex.EncodeToString(sum[:])] = true
	}
	for j, e := range journal {
		em, _ := e.(map[string]any)
		a.check()
		if seq := number(em["seq"]); seq != int64(j+1) {
			fail(nil, fmt.Sprintf("detail.journal[%d].seq", j), strconv.Itoa(j+1)+" (the sink numbers its effects 1, 2, ...)", render(em["seq"]))
		}
		if sum, _ := str(em, "body_sha256"); !sent[sum] {
			fail(nil, fmt.Sprintf("detail.journal[%d].body_sha256", j), "the SHA-256 of a body one of the run's calls sent", strconv.Quote(sum))
		}
		if r := number(em["replica"]); r >= int64(c.Replicas) {
			fail(nil, fmt.Sprintf("detail.journal[%d].replica", j), fmt.Sprintf("below %d (the replicas the case runs)", c.Replicas), render(em["replica"]))
		}
	}
}

// compareVerdict compares the recorded verdict with the audit's own, field
// by field; a finding list of another length is reported once, naming the
// findings only one side has.
func (a *auditor) compareVerdict(own, rec tVerdict, fail func(*int, string, string, string)) {
	const by = " (the audit's own judge)"
	a.check()
	if own.safety != rec.safety {
		fail(nil, "verdict.safety", strconv.Quote(own.safety)+by, strconv.Quote(rec.safety))
	}
	if own.effects != rec.effects {
		fail(nil, "verdict.effects", strconv.FormatInt(own.effects, 10)+" (the counter)", strconv.FormatInt(rec.effects, 10))
	}
	if own.soundEffects != rec.soundEffects {
		fail(nil, "verdict.sound_effects", strconv.FormatInt(own.soundEffects, 10)+by, strconv.FormatInt(rec.soundEffects, 10))
	}
	for _, list := range []struct {
		field    string
		own, rec []tFinding
	}{{"findings", own.findings, rec.findings}, {"deviations", own.deviations, rec.deviations}} {
		a.check()
		field := "verdict." + list.field
		if len(list.own) != len(list.rec) {
			fail(nil, field, fmt.Sprintf("%d%s%s", len(list.own), by, onlyIn(list.own, list.rec, "; not observed: ")),
				fmt.Sprintf("%d%s", len(list.rec), onlyIn(list.rec, list.own, "; not the audit's: ")))
			continue
		}
		for i, o := range list.own {
			r := list.rec[i]
			for _, f := range []struct{ name, own, rec string }{
				{"rule", strconv.Quote(o.rule), strconv.Quote(r.rule)},
				{"call", callField(o.call), callField(r.call)},
				{"detail", strconv.Quote(o.detail), strconv.Quote(r.detail)},
				{"limitation", strconv.Quote(o.limitation), strconv.Quote(r.limitation)},
			} {
				if f.own != f.rec {
					fail(nil, fmt.Sprintf("%s[%d].%s", field, i, f.name), f.own+by, f.rec)
				}
			}
		}
	}
}

// onlyIn names the findings of xs that ys lacks, after prefix ("" for none).
func onlyIn(xs, ys []tFinding, prefix string) string {
	var names []string
	for _, x := range xs {
		if !slices.Contains(ys, x) {
			names = append(names, x.rule+" (call "+callField(x.call)+")")
		}
	}
	if len(names) == 0 {
		return ""
	}
	out := prefix
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

func callField(call int) string {
	if call < 0 {
		return "null"
	}
	return strconv.Itoa(call)
}

// noteOnce adds a note unless it is already there.
func (a *auditor) noteOnce(s string) {
	if !slices.Contains(a.report.Notes, s) {
		a.note(s)
	}
}

// checkTargetsReport compares TARGETS.md byte for byte with the audit's
// own rendering (targetsReport) of the targets as checked; complete is
// false when a target could not be read, and then TARGETS.md is not
// compared.
func (a *auditor) checkTargetsReport(views []*targetView, complete bool) {
	data, ok := a.evidenceFile(TargetsReportFile)
	if !ok {
		return // reported by the file checks
	}
	a.check()
	if !complete {
		a.note("TARGETS.md not compared: a target of targets.json could not be read, or the targets do not line up with the selection")
		return
	}
	a.claim("targets_report")
	if want := targetsReport(views); !bytes.Equal(data, want) {
		a.fail(Failure{Check: CheckReport, Field: TargetsReportFile,
			Message: "TARGETS.md: differs from the audit's own rendering of targets.json: " + firstDiff(want, data)})
	}
}

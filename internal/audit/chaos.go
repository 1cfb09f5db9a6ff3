package audit

import (
	"bytes"
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

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// The chaos experiment's files: one summary, one history per store.
const ChaosFile = "chaos.json"

// chaosHistoryFile names the JSON Lines history of the chaos run on store.
func chaosHistoryFile(store string) string { return "chaos-" + store + ".jsonl" }

// chaosHistoryName matches the name of a chaos history.
var chaosHistoryName = regexp.MustCompile(`^chaos-([a-z]+)\.jsonl$`)

// maxChaosLines bounds the failure lines one rule prints per store; the
// rest are counted in one more line.
const maxChaosLines = 10

// The checker's rules, in chaos.json's order, and what each store promises:
// every store promises that none fires, except that the volatile store
// (keys in one process's memory) may apply an intent again after a restart
// or on another replica: its duplicates are counted and shown.
var chaosRules = []string{"duplicate", "lost_ack", "stuck", "value_mismatch", "value_reused", "value_order", "unknown_effect", "bad_journal"}

func chaosPromised(store, rule string) bool { return !(store == "volatile" && rule == "duplicate") }

// chaosFaults are the fault names an attempt may carry (a list joined by
// commas); delay and stall take "=NNms".
var chaosFaults = []string{"delay", "slow", "crash-before-effect", "stall", "crash-after-effect", "crash-after-record", "drop-reply"}

// isStreamed reports whether checkFiles must hash the listed file p by
// streaming it (a chaos history, too large to hold whole) instead of
// reading it; when so it has done so, with the same checks and counts.
func (a *auditor) isStreamed(p string) bool {
	m := chaosHistoryName.FindStringSubmatch(p)
	if m == nil {
		return false
	}
	sel, _ := a.manifest["selection"].(map[string]any)
	if !slices.Contains(stringList(sel, "experiments"), "chaos") {
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

// loadSchema compiles root/schema/NAME.schema.json under its $id URL,
// loading nothing from outside schema/.
func loadSchema(root, name string) (*jsonschema.Schema, error) {
	rel := "schema/" + name + ".schema.json"
	data, err := readInside(root, rel, CapSource)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, unwrapPath(err))
	}
	c := jsonschema.NewCompiler()
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("refusing to load %s: only schema/ is trusted", s)
	}
	if err := c.AddResource(SchemaBase+name+".schema.json", bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	s, err := c.Compile(SchemaBase + name + ".schema.json")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return s, nil
}

// chaosFail records one failed chaos check.
func (a *auditor) chaosFail(store, field, format string, args ...any) {
	a.fail(Failure{Check: CheckChaos, Store: store, Field: field, Message: fmt.Sprintf(format, args...)})
}

// checkChaos checks the chaos experiment: chaos.json against its schema;
// one run per store the chaos experiment covers (the selection's stores;
// when the selection names none, as a chaos-only run writes it, the
// stores chaos.json lists, at least one), in store order, each with its
// history listed; every history parsed strictly and judged again by the
// audit's own checker; chaos.json's counts and verdict equal to what the
// audit derived; and no violation of a rule the store promises.
func (a *auditor) checkChaos() {
	a.check()
	schema, err := loadSchema(a.opts.Root, "chaos")
	if err != nil {
		a.chaosFail("", "schema", "%s: cannot check: %v", ChaosFile, err)
		return
	}
	doc, _ := a.jsonDoc(ChaosFile, schema).(map[string]any)
	a.release(ChaosFile)
	if doc == nil {
		a.note(ChaosFile + " is missing or invalid: its checks were not made")
		return
	}
	runs, _ := doc["runs"].([]any)
	var stores []string
	byStore := map[string]map[string]any{}
	for i, r := range runs {
		run, _ := r.(map[string]any)
		s, _ := str(run, "store")
		if _, dup := byStore[s]; dup {
			a.chaosFail(s, "runs", "%s: runs[%d]: a second run of store %s", ChaosFile, i, s)
			continue
		}
		byStore[s] = run
		stores = append(stores, s)
	}
	a.check()
	if !slices.Equal(orderStores(slices.Clone(stores)), stores) {
		a.chaosFail("", "runs", "%s: runs: stores %s not in store order (%s)", ChaosFile, strings.Join(stores, ", "), strings.Join(StoreOrder, ", "))
	}
	want := a.selStores
	if len(want) == 0 {
		want = stores
		if len(stores) == 0 {
			a.chaosFail("", "runs", "%s: runs: empty: the chaos experiment ran on no store", ChaosFile)
		} else {
			a.note(fmt.Sprintf("chaos: manifest.json selects no stores (a chaos-only run): checked the stores %s lists: %s", ChaosFile, strings.Join(stores, ", ")))
		}
	}
	for _, s := range want {
		a.check()
		if byStore[s] == nil {
			a.chaosFail(s, "runs", "%s: store %s: selected, but no chaos run", ChaosFile, s)
		}
	}
	for _, s := range stores {
		if !slices.Contains(want, s) {
			a.chaosFail(s, "runs", "%s: store %s: a chaos run of a store manifest.json does not select", ChaosFile, s)
		}
	}
	for p := range a.listed {
		if m := chaosHistoryName.FindStringSubmatch(p); m != nil && byStore[m[1]] == nil {
			a.chaosFail(m[1], "files", "file %s: a history without a run in %s", p, ChaosFile)
		}
	}
	crash := number(mapOf(a.manifest, "protocol")["crash_exit_code"])
	for _, s := range stores {
		a.checkChaosRun(s, byStore[s], crash)
	}
}

func mapOf(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

// checkChaosRun re-derives one store's run from its history and compares.
func (a *auditor) checkChaosRun(store string, run map[string]any, crashCode int64) {
	name := chaosHistoryFile(store)
	a.check()
	if !a.isListed(name) {
		a.chaosFail(store, "files", "file %s: the history of %s's chaos run: not listed in manifest.files", name, store)
		return
	}
	f, err := openInside(a.opts.Evidence, name, CapHistory)
	if err != nil {
		return // reported by the file checks
	}
	h := sha256.New()
	hist, err := readChaosHistory(io.TeeReader(io.LimitReader(f, CapHistory+1), h))
	f.Close()
	if err != nil {
		a.chaosFail(store, "history", "%s: %v", name, err)
		return
	}
	if hex.EncodeToString(h.Sum(nil)) != a.listed[name] && !slices.ContainsFunc(a.report.Failures, func(x Failure) bool {
		return x.Check == CheckFile && strings.HasPrefix(x.Message, "file "+name+":")
	}) {
		a.failf(CheckFile, "file %s: changed while being read", name)
	}
	a.check()
	if hist.store != store {
		a.chaosFail(store, "store", "%s: run header: store %q, expected %q", name, hist.store, store)
	}
	if seed := render(run["seed"]); seed != strconv.FormatUint(hist.seed, 10) {
		a.chaosFail(store, "seed", "%s: store %s: seed: expected %d (the history's), observed %s", ChaosFile, store, hist.seed, seed)
	}
	if r := number(mapOf(run, "parameters")["replicas"]); r != int64(hist.replicas) {
		a.chaosFail(store, "parameters.replicas", "%s: store %s: parameters.replicas: expected %d (the history's), observed %d", ChaosFile, store, hist.replicas, r)
	}
	c := hist.check(crashCode)
	a.checkChaosParams(store, run)
	a.checkSeed(CheckChaos, store, ChaosFile, "store "+store+": ", run["seed"])
	params := mapOf(run, "parameters")
	capped := mapOf(run, "capped")
	hist.checkConsistency(store, chaosRunParams{ // chaos_consistency.go
		durationMS: number(params["duration_ms"]), killEveryMS: number(params["kill_every_ms"]),
		maxAttempts: number(params["max_attempts"]), quietAttempts: number(params["quiet_attempts"]),
		cappedIntents: capped["intents"] == true, cappedAttmpt: capped["history"] == true,
	})
	a.reportChaosIssues(store, name, hist.issues)
	a.claim("chaos_schedule")
	a.claim("chaos_history")

	// Every violation of a promised rule, named by intent.
	a.claim("chaos_promises")
	a.claim("chaos_verdict")
	for _, rule := range chaosRules {
		if !chaosPromised(store, rule) {
			continue
		}
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
			a.fail(Failure{Check: CheckChaos, Store: store, Field: rule,
				Message: fmt.Sprintf("%s: store %s promises no %s: %s: %s", name, store, rule, who, fd.detail)})
		}
		if fired > maxChaosLines {
			a.chaosFail(store, rule, "%s: store %s promises no %s: %d more", name, store, rule, fired-maxChaosLines)
		}
	}

	// The counts chaos.json records, against the audit's own.
	counts := mapOf(run, "counts")
	for _, k := range sortedKeys(c.counts) {
		a.check()
		v, ok := counts[k]
		if got := number(v); !ok || got != c.counts[k] {
			a.chaosFail(store, "counts."+k, "%s: store %s: counts.%s: expected %d (re-derived from %s), observed %s", ChaosFile, store, k, c.counts[k], name, render(v))
		}
	}
	faults := mapOf(counts, "faults")
	for _, k := range chaosFaults {
		a.check()
		v, ok := faults[k]
		if got := number(v); !ok || got != c.faults[k] {
			a.chaosFail(store, "counts.faults."+k, "%s: store %s: counts.faults.%s: expected %d (re-derived from %s), observed %s", ChaosFile, store, k, c.faults[k], name, render(v))
		}
	}
	for _, k := range sortedKeys(faults) {
		if !slices.Contains(chaosFaults, k) {
			a.chaosFail(store, "counts.faults."+k, "%s: store %s: counts.faults.%s: not a fault", ChaosFile, store, k)
		}
	}

	// The verdict.
	verdict := mapOf(run, "verdict")
	count := c.fired
	var violations, shownN int64
	for _, rule := range chaosRules {
		if chaosPromised(store, rule) {
			violations += count[rule]
		} else {
			shownN += count[rule]
		}
	}
	wantRules := make([]any, len(chaosRules))
	for i, r := range chaosRules {
		wantRules[i] = map[string]any{"rule": r, "promised": chaosPromised(store, r), "count": jsonNum(strconv.FormatInt(count[r], 10))}
	}
	// The findings chaos.json lists: the first 100, violations first, each
	// named by rule and intent (the detail's wording is the runner's); the
	// checker keeps the first 100 of each rule, all this needs.
	var wantListed, gotListed []string
	for _, promised := range []bool{true, false} {
		for _, fd := range c.findings {
			if chaosPromised(store, fd.rule) == promised && len(wantListed) < 100 {
				wantListed = append(wantListed, fmt.Sprintf("%s/%d", fd.rule, fd.intent))
			}
		}
	}
	listed, _ := verdict["findings"].([]any)
	for _, x := range listed {
		m, _ := x.(map[string]any)
		r, _ := str(m, "rule")
		gotListed = append(gotListed, fmt.Sprintf("%s/%s", r, render(m["intent"])))
	}
	for _, cmpf := range []struct {
		field      string
		want, have string
	}{
		{"ok", strconv.FormatBool(violations == 0), render(verdict["ok"])},
		{"violations", strconv.FormatInt(violations, 10), render(verdict["violations"])},
		{"shown", strconv.FormatInt(shownN, 10), render(verdict["shown"])},
		{"rules", render(wantRules), render(verdict["rules"])},
		{"findings_listed", strconv.Itoa(len(wantListed)), render(verdict["findings_listed"])},
		{"findings", strings.Join(wantListed, " "), strings.Join(gotListed, " ")},
	} {
		a.check()
		if cmpf.want != cmpf.have {
			a.chaosFail(store, "verdict."+cmpf.field, "%s: store %s: verdict.%s: expected %s (re-derived from %s), observed %s",
				ChaosFile, store, cmpf.field, clipS(cmpf.want), name, clipS(cmpf.have))
		}
	}
	for _, k := range sortedKeys(verdict) {
		if !slices.Contains([]string{"ok", "violations", "shown", "rules", "findings", "findings_listed"}, k) {
			a.chaosFail(store, "verdict."+k, "%s: store %s: verdict.%s: not a field of the verdict", ChaosFile, store, k)
		}
	}
}

// checkChaosParams checks a run's parameters: each the design's
// (chaosParams), or what manifest.flags records for its knob (params.go).
func (a *auditor) checkChaosParams(store string, run map[string]any) {
	a.claim("params")
	params := mapOf(run, "parameters")
	for _, p := range chaosParams {
		a.check()
		want, src := a.expected(p.name, p.value)
		if got := render(params[p.name]); got != fmt.Sprint(want) {
			a.fail(Failure{Check: CheckChaos, Store: store, Field: "parameters." + p.name, Expected: fmt.Sprint(want), Observed: got,
				Message: fmt.Sprintf("%s: store %s: parameters.%s: expected %d (%s), observed %s", ChaosFile, store, p.name, want, src, got)})
		}
	}
}

// maxIssueLines bounds the consistency issues of one kind printed per
// history; the rest are counted in one more line.
const maxIssueLines = 3

// reportChaosIssues reports the history's consistency issues, at most
// maxIssueLines of each kind and a count of the rest.
func (a *auditor) reportChaosIssues(store, name string, issues []chaosIssue) {
	for _, rule := range chaosIssueRules {
		a.check()
		var shown int
		for _, is := range issues {
			if is.rule != rule {
				continue
			}
			if shown++; shown <= maxIssueLines {
				a.fail(Failure{Check: CheckChaos, Store: store, Field: "history." + rule, Message: fmt.Sprintf("%s: %s", name, is.text)})
			}
		}
		if shown > maxIssueLines {
			a.chaosFail(store, "history."+rule, "%s: %d more like these (%s)", name, shown-maxIssueLines, rule)
		}
	}
}

func clipS(s string) string {
	if s == "" {
		return `""`
	}
	return clip([]byte(s))
}

package audit

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// CapHistory caps one chaos history. The audit streams a history line by
// line (never whole), so the cap bounds the time it takes and the state it
// keeps: a few dozen bytes per intent and per acknowledgement, not the
// lines. A 60-second soak per store writes about 8 MiB (about 25,000
// attempt lines and 14,000 effect lines); 256 MiB is 30 times that.
const CapHistory = 256 << 20

// maxHistoryLine bounds one history line (the runner shortens errors and
// reply bodies; a line is a few hundred bytes).
const maxHistoryLine = 64 << 10

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
	sum, err := hashInside(a.opts.Evidence, p, CapHistory)
	switch {
	case errors.Is(err, os.ErrNotExist):
		a.failf(CheckFile, "file %s: listed in the manifest but missing from the evidence folder", p)
	case err != nil:
		a.failf(CheckFile, "file %s: %v", p, unwrapPath(err))
	case sum != a.listed[p]:
		a.failf(CheckFile, "file %s: SHA-256 does not match the manifest", p)
	default:
		a.report.Files++
	}
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
		var shown int
		for _, fd := range c.findings {
			if fd.rule != rule {
				continue
			}
			a.check()
			if shown++; shown > maxChaosLines {
				continue
			}
			who := "the journal"
			if fd.intent >= 0 {
				who = fmt.Sprintf("intent %d (key %s)", fd.intent, fd.key)
			}
			a.fail(Failure{Check: CheckChaos, Store: store, Field: rule,
				Message: fmt.Sprintf("%s: store %s promises no %s: %s: %s", name, store, rule, who, fd.detail)})
		}
		if shown > maxChaosLines {
			a.chaosFail(store, rule, "%s: store %s promises no %s: %d more", name, store, rule, shown-maxChaosLines)
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
	count := map[string]int64{}
	var violations, shownN int64
	for _, fd := range c.findings {
		count[fd.rule]++
		if chaosPromised(store, fd.rule) {
			violations++
		} else {
			shownN++
		}
	}
	wantRules := make([]any, len(chaosRules))
	for i, r := range chaosRules {
		wantRules[i] = map[string]any{"rule": r, "promised": chaosPromised(store, r), "count": jsonNum(strconv.FormatInt(count[r], 10))}
	}
	// The findings chaos.json lists: the first 100, violations first, each
	// named by rule and intent (the detail's wording is the runner's).
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

// A chaosHistory is what the audit keeps of one history while streaming
// it: per intent and per acknowledgement a few numbers, never the lines.
type chaosHistory struct {
	store    string
	seed     uint64
	replicas int

	intents map[int64]*chaosIntent
	bySHA   map[string]int64
	acks    []chaosAck // every 200 reply, in start order

	attempts, chaosAttempts, quietAttempts, ok, fail, info, faulted int64
	faults                                                          map[string]int64
	latencies                                                       []int64
	quietIntents                                                    map[int64]bool
	events                                                          []chaosEvent

	places []chaosPlace

	// What the consistency checks keep (chaos_consistency.go).
	sched             chaosSchedule
	firstAttemptStart int64 // -1 before the first attempt
	issues            []chaosIssue
}

type chaosIntent struct {
	key, sha string
	acked    bool

	// The intent's attempts so far, in order (chaos_consistency.go).
	next      int64           // the number its next attempt must carry
	lastEnd   int64           // the end of its last attempt
	lastPhase string          // the phase of its last attempt ("" before the first)
	chaosN    int64           // chaos-phase attempts
	quietN    int64           // quiet-phase attempts
	applyable map[int64]int64 // per replica, the attempts that may have applied it (no reply, or a 200 not replayed)
}

type chaosAck struct {
	intent, attempt, replica int64
	start, end               int64
	value                    string
	replayed                 *bool
	earlier                  []int64 // a replayed reply's: the replicas of the intent's earlier attempts without a reply
}

type chaosEvent struct {
	kind          string
	replica, code int64
	at            int64
}

type chaosPlace struct {
	place    int64
	replicas []int64
	counter  int64
	effects  []chaosEffect
}

type chaosEffect struct {
	value int64
	sha   string
}

// Line shapes: each kind's members, all required, none other.
var chaosLineFields = map[string][]string{
	"run":     {"kind", "history_version", "store", "seed", "replicas", "attempts", "server_events", "places"},
	"attempt": {"kind", "intent", "key", "body_sha256", "replica", "attempt", "phase", "start_us", "end_us", "fault", "type", "outcome", "status", "value", "replayed", "error"},
	"event":   {"kind", "replica", "at_us", "pid", "addr", "exit_code", "error"},
	"place":   {"kind", "place", "replicas", "counter", "effects"},
	"effect":  {"kind", "place", "value", "body_sha256"},
}

var chaosEventKinds = []string{"start", "start_failed", "kill", "exit", "stop"}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// A lineReader reads one history's fields with its line number.
type lineReader struct {
	no  int
	obj map[string]any
	err error
}

func (l *lineReader) failf(format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf("line %d (%s): %s", l.no, l.obj["kind"], fmt.Sprintf(format, args...))
	}
}

// int reads an integer member in [lo, hi].
func (l *lineReader) int(name string, lo, hi int64) int64 {
	n, ok := l.obj[name].(jsonNumber)
	if !ok {
		l.failf("%s: want an integer", name)
		return 0
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || i < lo || i > hi {
		l.failf("%s: %s: want an integer in %d..%d", name, n, lo, hi)
	}
	return i
}

func (l *lineReader) str(name string) string {
	s, ok := l.obj[name].(string)
	if !ok {
		l.failf("%s: want a string", name)
	}
	return s
}

func (l *lineReader) sha(name string) string {
	s := l.str(name)
	if !sha256Hex.MatchString(s) {
		l.failf("%s: %q: want 64 lowercase hex digits", name, s)
	}
	return s
}

const maxInt = 1<<63 - 1

// jsonNumber is how decodeJSON gives a number.
type jsonNumber = json.Number

// readChaosHistory reads a history strictly, line by line: a "run" header
// first (history_version 1), then attempt and server-event lines in time
// order, then per place a "place" line and exactly the effect lines it
// announces; every line one JSON object (strict: no duplicate member,
// valid UTF-8) with exactly its kind's members, each of its type and
// range; the header's counts equal the lines. An error names the line.
func readChaosHistory(r io.Reader) (*chaosHistory, error) {
	br := bufio.NewReaderSize(r, maxHistoryLine)
	h := &chaosHistory{intents: map[int64]*chaosIntent{}, bySHA: map[string]int64{}, faults: map[string]int64{}, quietIntents: map[int64]bool{},
		firstAttemptStart: -1}
	var (
		no                            int
		hdrAttempts, hdrEvents, hdrPl int64
		seenHeader                    bool
		lastTime                      int64
		effectsLeft                   int64
		size                          int64
	)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("line %d: longer than %d bytes", no+1, maxHistoryLine)
		}
		if err == io.EOF && len(line) == 0 {
			break
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %v", no+1, err)
		}
		no++
		if size += int64(len(line)); size > CapHistory {
			return nil, fmt.Errorf("over the cap of %d bytes", CapHistory)
		}
		if err == io.EOF {
			return nil, fmt.Errorf("line %d: no final newline", no)
		}
		v, derr := decodeJSON(line)
		obj, _ := v.(map[string]any)
		if derr != nil || obj == nil {
			return nil, fmt.Errorf("line %d: not a JSON object: %v", no, derr)
		}
		l := &lineReader{no: no, obj: obj}
		kind, _ := obj["kind"].(string)
		shape := kind
		if slices.Contains(chaosEventKinds, kind) {
			shape = "event"
		}
		fields, known := chaosLineFields[shape]
		if !known {
			return nil, fmt.Errorf("line %d: unknown kind %s", no, render(obj["kind"]))
		}
		for k := range obj {
			if !slices.Contains(fields, k) {
				return nil, fmt.Errorf("line %d (%s): unknown member %q", no, kind, k)
			}
		}
		for _, k := range fields {
			if _, ok := obj[k]; !ok {
				return nil, fmt.Errorf("line %d (%s): missing member %q", no, kind, k)
			}
		}
		if !seenHeader && kind != "run" {
			return nil, fmt.Errorf("line %d: want the \"run\" header first, got kind %q", no, kind)
		}
		inPlaces := len(h.places) > 0
		switch shape {
		case "run":
			if seenHeader {
				return nil, fmt.Errorf("line %d: a second \"run\" header", no)
			}
			seenHeader = true
			l.int("history_version", 1, 1)
			h.store = l.str("store")
			if !slices.Contains(StoreOrder, h.store) {
				l.failf("store %q: want one of %s", h.store, strings.Join(StoreOrder, ", "))
			}
			if n, ok := obj["seed"].(jsonNumber); ok {
				s, err := strconv.ParseUint(string(n), 10, 64)
				if err != nil {
					l.failf("seed: %s: want an unsigned integer", n)
				}
				h.seed = s
			} else {
				l.failf("seed: want an integer")
			}
			h.replicas = int(l.int("replicas", 1, 1000))
			h.sched = chaosSchedule{seed: h.seed, replicas: h.replicas}
			hdrAttempts = l.int("attempts", 0, maxInt)
			hdrEvents = l.int("server_events", 0, maxInt)
			hdrPl = l.int("places", 0, 1000)
		case "attempt":
			if inPlaces {
				return nil, fmt.Errorf("line %d: an attempt after the place lines", no)
			}
			h.attempt(l, &lastTime)
		case "event":
			if inPlaces {
				return nil, fmt.Errorf("line %d: a server event after the place lines", no)
			}
			rep := l.int("replica", 0, int64(h.replicas-1))
			at := l.int("at_us", 0, maxInt)
			l.int("pid", 0, maxInt)
			l.str("addr")
			code := l.int("exit_code", -1, 255)
			l.str("error")
			if at < lastTime {
				l.failf("at_us %d: before the line above (%d µs): lines must be in time order", at, lastTime)
			}
			lastTime = at
			h.events = append(h.events, chaosEvent{kind, rep, code, at})
		case "place":
			if effectsLeft != 0 {
				return nil, fmt.Errorf("line %d: place line while %d effect lines of the place above are missing", no, effectsLeft)
			}
			p := chaosPlace{place: l.int("place", 0, 1000), counter: l.int("counter", 0, maxInt)}
			effectsLeft = l.int("effects", 0, maxInt)
			reps, ok := obj["replicas"].([]any)
			if !ok {
				l.failf("replicas: want an array")
			}
			for _, r := range reps {
				n, _ := r.(jsonNumber)
				i, err := strconv.ParseInt(string(n), 10, 64)
				if err != nil || i < 0 || i >= int64(h.replicas) {
					l.failf("replicas: %s: want a replica 0..%d", render(r), h.replicas-1)
				}
				p.replicas = append(p.replicas, i)
			}
			for _, q := range h.places {
				if q.place == p.place {
					l.failf("place %d: a second place line", p.place)
				}
			}
			h.places = append(h.places, p)
		case "effect":
			if !inPlaces || effectsLeft == 0 {
				return nil, fmt.Errorf("line %d: an effect line its place line does not announce", no)
			}
			p := &h.places[len(h.places)-1]
			if pl := l.int("place", 0, 1000); pl != p.place {
				l.failf("place %d: an effect of place %d among place %d's lines", pl, pl, p.place)
			}
			p.effects = append(p.effects, chaosEffect{l.int("value", 0, maxInt), l.sha("body_sha256")})
			effectsLeft--
		}
		if l.err != nil {
			return nil, l.err
		}
	}
	switch {
	case !seenHeader:
		return nil, errors.New("empty: no \"run\" header")
	case effectsLeft != 0:
		return nil, fmt.Errorf("place %d: %d announced effect lines missing at the end", h.places[len(h.places)-1].place, effectsLeft)
	case h.attempts != hdrAttempts || int64(len(h.events)) != hdrEvents || int64(len(h.places)) != hdrPl:
		return nil, fmt.Errorf("%d attempt lines, %d server events, %d places; the run header announces %d, %d, %d",
			h.attempts, len(h.events), len(h.places), hdrAttempts, hdrEvents, hdrPl)
	}
	return h, nil
}

// attempt reads one attempt line into h.
func (h *chaosHistory) attempt(l *lineReader, lastTime *int64) {
	n := l.int("intent", 0, maxInt)
	key, sha := l.str("key"), l.sha("body_sha256")
	rep := l.int("replica", 0, int64(h.replicas-1))
	att := l.int("attempt", 0, maxInt)
	phase := l.str("phase")
	start, end := l.int("start_us", 0, maxInt), l.int("end_us", 0, maxInt)
	fault, typ, outcome := l.str("fault"), l.str("type"), l.str("outcome")
	status := l.int("status", 0, 599)
	value, errText := l.str("value"), l.str("error")
	var replayed *bool
	switch v := l.obj["replayed"].(type) {
	case bool:
		replayed = &v
	case nil:
	default:
		l.failf("replayed: want true, false or null")
	}
	switch {
	case phase != "chaos" && phase != "quiet":
		l.failf("phase %q: want chaos or quiet", phase)
	case end < start:
		l.failf("end_us %d before start_us %d", end, start)
	case start < *lastTime:
		l.failf("start_us %d: before the line above (%d µs): lines must be in time order", start, *lastTime)
	}
	*lastTime = start
	// The outcome, in Jepsen's terms: a reply is ok (200) or fail; no reply
	// is fail when refused (nothing listened), else info (unknown).
	wantType := ""
	switch outcome {
	case "reply":
		if status < 100 || errText != "" {
			l.failf("outcome reply with status %d and error %q", status, errText)
		}
		wantType = "fail"
		if status == 200 {
			wantType = "ok"
		}
	case "refused", "no_reply", "timeout":
		if status != 0 || value != "" || replayed != nil {
			l.failf("outcome %s (no reply) with status %d, value %q or a replay marker", outcome, status, value)
		}
		wantType = "info"
		if outcome == "refused" {
			wantType = "fail"
		}
	default:
		l.failf("outcome %q: want reply, refused, no_reply or timeout", outcome)
	}
	if typ != wantType {
		l.failf("type %q: outcome %s with status %d is %q", typ, outcome, status, wantType)
	}
	if fault != "" {
		for _, f := range strings.Split(fault, ",") {
			name, arg, hasArg := strings.Cut(f, "=")
			ok := slices.Contains(chaosFaults, name) && (name == "delay" || name == "stall") == hasArg
			if hasArg {
				ms, err := strconv.Atoi(strings.TrimSuffix(arg, "ms"))
				ok = ok && strings.HasSuffix(arg, "ms") && err == nil && ms >= 0
			}
			if !ok {
				l.failf("fault %q: %q is not a fault", fault, f)
				break
			}
			h.faults[name]++
		}
		h.faulted++
	}
	in := h.intents[n]
	if in == nil {
		if other, dup := h.bySHA[sha]; dup {
			l.failf("intent %d: body_sha256 of intent %d (each intent has its own body)", n, other)
		}
		in = &chaosIntent{key: key, sha: sha, applyable: map[int64]int64{}}
		h.intents[n] = in
		h.bySHA[sha] = n
	} else if in.key != key || in.sha != sha {
		l.failf("intent %d: key or body_sha256 differs from its first attempt", n)
	}
	earlier := h.attemptInOrder(l.no, n, in, chaosLine{replica: rep, attempt: att, phase: phase, start: start, end: end,
		fault: fault, typ: typ, replayed: replayed}) // chaos_consistency.go
	h.attempts++
	if phase == "quiet" {
		h.quietAttempts++
		h.quietIntents[n] = true
	} else {
		h.chaosAttempts++
	}
	switch typ {
	case "ok":
		h.ok++
		h.latencies = append(h.latencies, end-start)
		in.acked = true
		h.acks = append(h.acks, chaosAck{n, att, rep, start, end, value, replayed, earlier})
	case "fail":
		h.fail++
	default:
		h.info++
	}
}

// A chaosFinding is one rule firing (intent -1: about the journal).
type chaosFinding struct {
	rule   string
	intent int64
	key    string
	detail string
}

// chaosCheck is what the audit's checker derives from a history.
type chaosCheck struct {
	counts   map[string]int64
	faults   map[string]int64
	findings []chaosFinding // in rule order, then intent
}

// check judges h against its own journal, by the rules the chaos
// experiment documents (internal/chaos), written here from those rules:
//
//   - per intent (named by its body's SHA-256, which the journal keeps):
//     applied n times over every place; n ≥ 2 is a duplicate; acknowledged
//     (a 200) with n = 0 a lost acknowledgement; never acknowledged stuck;
//     with n ≥ 1, each 200's value must be one of the intent's effects at
//     the place of the replica that replied (value_mismatch);
//   - per place, over the non-replayed 200s: no value twice (value_reused),
//     and a reply that began after another ended carries a larger value
//     (value_order: one finding per earlier reply whose value is exceeded,
//     the culprit being the largest value ended before each reply began);
//   - the journal: each effect's body was sent by an intent
//     (unknown_effect); each place's effects are 1..counter in order, each
//     replica at exactly one place (bad_journal).
//
// The journal numbers the effects in the only order a counter's
// increments can be linearized in, so these rules are the whole
// linearizability check: no search over orders is needed.
func (h *chaosHistory) check(crashCode int64) chaosCheck {
	c := chaosCheck{counts: map[string]int64{}, faults: map[string]int64{}}
	add := func(rule string, intent int64, key, format string, args ...any) {
		c.findings = append(c.findings, chaosFinding{rule, intent, key, fmt.Sprintf(format, args...)})
	}
	placeOf := map[int64]int64{}
	for _, p := range h.places {
		for _, r := range p.replicas {
			if old, dup := placeOf[r]; dup {
				add("bad_journal", -1, "", "replica %d listed at places %d and %d", r, old, p.place)
			}
			placeOf[r] = p.place
		}
		if int64(len(p.effects)) != p.counter {
			add("bad_journal", -1, "", "place %d: counter %d, %d effects journaled", p.place, p.counter, len(p.effects))
		}
		for i, e := range p.effects {
			if e.value != int64(i+1) {
				add("bad_journal", -1, "", "place %d: effect %d has value %d", p.place, i+1, e.value)
				break
			}
		}
	}
	for r := int64(0); r < int64(h.replicas); r++ {
		if _, ok := placeOf[r]; !ok {
			add("bad_journal", -1, "", "replica %d has no place", r)
		}
	}
	applied := map[int64]map[int64][]int64{} // intent -> place -> values
	var effects int64
	for _, p := range h.places {
		for _, e := range p.effects {
			effects++
			n, ok := h.bySHA[e.sha]
			if !ok {
				add("unknown_effect", -1, "", "place %d: effect %d has body SHA-256 %s, which no intent sent", p.place, e.value, e.sha)
				continue
			}
			if applied[n] == nil {
				applied[n] = map[int64][]int64{}
			}
			applied[n][p.place] = append(applied[n][p.place], e.value)
		}
	}
	numbers := make([]int64, 0, len(h.intents))
	for n := range h.intents {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	firstAck := map[int64]chaosAck{}
	for _, a := range h.acks {
		if _, ok := firstAck[a.intent]; !ok {
			firstAck[a.intent] = a
		}
	}
	var once, dups, notApplied, acked, lost, stuck int64
	for _, n := range numbers {
		in := h.intents[n]
		times := 0
		for _, vs := range applied[n] {
			times += len(vs)
		}
		switch {
		case times == 0:
			notApplied++
		case times == 1:
			once++
		default:
			dups++
			add("duplicate", n, in.key, "applied %d times (%s)", times, whereApplied(applied[n]))
		}
		switch {
		case !in.acked:
			stuck++
			add("stuck", n, in.key, "never acknowledged; applied %d times", times)
		case times == 0:
			acked++
			lost++
			a := firstAck[n]
			add("lost_ack", n, in.key, "attempt %d on replica %d got 200 %q, and the journal holds no effect of it", a.attempt, a.replica, a.value)
		default:
			acked++
		}
	}
	type valued struct {
		chaosAck
		v int64
	}
	perPlace := map[int64][]valued{}
	for _, a := range h.acks {
		v, err := strconv.ParseInt(a.value, 10, 64)
		pl, ok := placeOf[a.replica]
		if vs := applied[a.intent]; len(vs) > 0 && (err != nil || !ok || !slices.Contains(vs[pl], v)) {
			add("value_mismatch", a.intent, h.intents[a.intent].key, "attempt %d on replica %d got 200 %q; the intent's effects: %s", a.attempt, a.replica, a.value, whereApplied(vs))
		}
		if a.replayed == nil || *a.replayed || err != nil || !ok {
			continue
		}
		perPlace[pl] = append(perPlace[pl], valued{a, v})
	}
	for _, pl := range sortedInts(perPlace) {
		acks := perPlace[pl]
		byValue := slices.Clone(acks)
		slices.SortFunc(byValue, func(x, y valued) int {
			return cmp.Or(cmp.Compare(x.v, y.v), cmp.Compare(x.intent, y.intent), cmp.Compare(x.attempt, y.attempt))
		})
		for i := 1; i < len(byValue); i++ {
			if x, y := byValue[i-1], byValue[i]; x.v == y.v {
				add("value_reused", y.intent, h.intents[y.intent].key, "place %d: value %d acknowledged (not replayed) to intent %d attempt %d and intent %d attempt %d", pl, y.v, x.intent, x.attempt, y.intent, y.attempt)
			}
		}
		byEnd := slices.Clone(acks)
		slices.SortStableFunc(byEnd, func(x, y valued) int { return cmp.Compare(x.end, y.end) })
		byStart := slices.Clone(acks)
		slices.SortStableFunc(byStart, func(x, y valued) int { return cmp.Compare(x.start, y.start) })
		smallest := map[int]valued{} // culprit (index in byEnd) -> the smallest value it exceeds
		j, best := 0, -1
		for _, b := range byStart {
			for ; j < len(byEnd) && byEnd[j].end < b.start; j++ {
				if best < 0 || byEnd[j].v > byEnd[best].v {
					best = j
				}
			}
			if best >= 0 && byEnd[best].v > b.v {
				if s, ok := smallest[best]; !ok || b.v < s.v {
					smallest[best] = b
				}
			}
		}
		for _, i := range sortedInts(smallest) {
			x, b := byEnd[i], smallest[i]
			add("value_order", b.intent, h.intents[b.intent].key, "place %d: attempt %d began at %d µs and got value %d, but intent %d was acknowledged value %d at %d µs, before it began",
				pl, b.attempt, b.start, b.v, x.intent, x.v, x.end)
		}
	}
	order := func(r string) int { return slices.Index(chaosRules, r) }
	slices.SortStableFunc(c.findings, func(x, y chaosFinding) int {
		return cmp.Or(cmp.Compare(order(x.rule), order(y.rule)), cmp.Compare(x.intent, y.intent), cmp.Compare(x.detail, y.detail))
	})

	n := c.counts
	n["intents"], n["acked"], n["applied_once"], n["duplicates"], n["not_applied"], n["lost_acks"], n["stuck"] =
		int64(len(numbers)), acked, once, dups, notApplied, lost, stuck
	n["attempts"], n["chaos_attempts"], n["quiet_attempts"] = h.attempts, h.chaosAttempts, h.quietAttempts
	n["ok"], n["fail"], n["info"], n["faulted_attempts"] = h.ok, h.fail, h.info, h.faulted
	n["effects"] = effects
	n["unresolved_after_chaos"] = int64(len(h.quietIntents))
	n["latency_ok_p50_us"], n["latency_ok_p99_us"] = nearestRank(h.latencies, 50), nearestRank(h.latencies, 99)
	started := map[int64]bool{}
	for _, k := range []string{"kills", "crash_exits", "restarts", "start_failures", "clean_stops"} {
		n[k] = 0
	}
	for _, e := range h.events {
		switch e.kind {
		case "kill":
			n["kills"]++
		case "exit":
			if e.code == crashCode {
				n["crash_exits"]++
			}
		case "start":
			if started[e.replica] {
				n["restarts"]++
			}
			started[e.replica] = true
		case "start_failed":
			n["start_failures"]++
		case "stop":
			if e.code == 0 {
				n["clean_stops"]++
			}
		}
	}
	for _, f := range chaosFaults {
		c.faults[f] = h.faults[f]
	}
	return c
}

// whereApplied prints an intent's effects: "place 0 values [3 9]; ...".
func whereApplied(m map[int64][]int64) string {
	var parts []string
	for _, pl := range sortedInts(m) {
		parts = append(parts, fmt.Sprintf("place %d values %v", pl, m[pl]))
	}
	return strings.Join(parts, "; ")
}

// nearestRank is the nearest-rank p-th percentile of xs (0 for none).
func nearestRank(xs []int64, p int) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

func sortedInts[K int | int64, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

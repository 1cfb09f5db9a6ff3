package audit

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
)

// The experiment files. Each is checked only when manifest.files lists it.
const (
	RetriesFile = "retries.json"
	JitterFile  = "jitter.json"
)

// retriesRow is one row the retries experiment must hold, with the counts
// the design promises for it.
type retriesRow struct {
	client, registry string
	zero             []string // counts that must be 0
	positive         []string // counts that must be above 0
}

// retriesRows are the design's rows, in order: never-retry loses but never
// duplicates; retry-no-key never loses; retry-same-key on the sound
// registry neither loses nor duplicates; on record-after-effect it
// duplicates again.
var retriesRows = []retriesRow{
	{client: "never-retry", registry: "sound", zero: []string{"duplicated"}},
	{client: "retry-no-key", registry: "sound", zero: []string{"lost"}},
	{client: "retry-same-key", registry: "sound", zero: []string{"lost", "duplicated"}},
	{client: "retry-same-key", registry: "record-after-effect", positive: []string{"duplicated"}},
}

// experiments maps each experiment's name to its result file, in the
// order the runner runs them (and manifest.selection.experiments lists them).
var experiments = []struct{ name, file string }{{"retries", RetriesFile}, {"jitter", JitterFile}}

// experimentOnlySelection reports whether manifest.selection names no
// cases and at least one experiment.
func experimentOnlySelection(manifest map[string]any) bool {
	sel, _ := manifest["selection"].(map[string]any)
	return len(stringList(sel, "cases")) == 0 && len(stringList(sel, "experiments")) > 0
}

// checkExperiments validates and checks the experiment files that
// manifest.files lists (their hashes are checked with every other file),
// and checks that manifest.selection.experiments names exactly them.
func (a *auditor) checkExperiments() {
	listed := stringMap(a.manifest, "files")
	var present []string
	for _, e := range experiments {
		if _, ok := listed[e.file]; !ok {
			continue
		}
		present = append(present, e.name)
		doc := a.experimentDoc(e.file, a.schemaOf(e.file))
		switch {
		case doc == nil:
			a.note(e.file + " is missing or invalid: its checks were not made")
		case e.file == RetriesFile:
			a.checkRetries(doc)
		default:
			a.checkJitter(doc)
		}
		a.report.Experiments = append(a.report.Experiments, e.name)
	}
	a.check()
	sel, _ := a.manifest["selection"].(map[string]any)
	if got := stringList(sel, "experiments"); !slices.Equal(got, present) && (len(got) > 0 || len(present) > 0) {
		a.fail(Failure{Check: CheckExperiment, Field: "selection.experiments",
			Expected: render(toAny(present)), Observed: render(toAny(got)),
			Message: fmt.Sprintf("manifest.json: selection.experiments: expected %s (as in manifest.files), observed %s",
				render(toAny(present)), render(toAny(got)))})
	}
}

func (a *auditor) schemaOf(file string) *jsonschemaSchema {
	if file == RetriesFile {
		return a.schemas.Retries
	}
	return a.schemas.Jitter
}

// experimentDoc reads and validates an experiment file; nil if it cannot
// be read or is invalid (each reason is a schema failure).
func (a *auditor) experimentDoc(name string, s *jsonschemaSchema) map[string]any {
	a.check()
	data, err := readRegular(filepath.Join(a.opts.Evidence, name))
	if err != nil {
		a.failf(CheckSchema, "%s: cannot read: %v", name, unwrapPath(err))
		return nil
	}
	v, err := decodeJSON(data)
	if err != nil {
		a.failf(CheckSchema, "%s: not valid JSON: %v", name, err)
		return nil
	}
	lines := validate(s, v)
	for _, l := range lines {
		a.failf(CheckSchema, "%s: %s", name, l)
	}
	if len(lines) > 0 {
		return nil
	}
	doc, _ := v.(map[string]any)
	return doc
}

// experimentFail records one failed experiment check.
func (a *auditor) experimentFail(file, where, field, expected, observed string) {
	a.fail(Failure{Check: CheckExperiment, Field: field, Expected: expected, Observed: observed,
		Message: fmt.Sprintf("%s: %s: %s: expected %s, observed %s", file, where, field, expected, observed)})
}

// checkRetries checks the rows of a schema-valid retries.json: exactly the
// design's rows, each row's counts adding up to the intents, and each
// design promise about lost and duplicated intents.
func (a *auditor) checkRetries(doc map[string]any) {
	params, _ := doc["parameters"].(map[string]any)
	intents := number(params["intents"])
	rows, _ := doc["rows"].([]any)
	byName := map[string]map[string]any{}
	for i, r := range rows {
		row, _ := r.(map[string]any)
		c, _ := str(row, "client")
		g, _ := str(row, "registry")
		name := c + "/" + g
		a.check()
		if _, dup := byName[name]; dup {
			a.failf(CheckExperiment, "%s: row %s: duplicate row (rows[%d])", RetriesFile, name, i)
			continue
		}
		byName[name] = row
		known := false
		for _, want := range retriesRows {
			known = known || want.client == c && want.registry == g
		}
		if !known {
			a.failf(CheckExperiment, "%s: row %s: unexpected row (not one of the experiment's rows)", RetriesFile, name)
		}
	}
	for _, want := range retriesRows {
		name := want.client + "/" + want.registry
		where := "row " + name
		a.check()
		row, ok := byName[name]
		if !ok {
			a.failf(CheckExperiment, "%s: %s: missing row", RetriesFile, where)
			continue
		}
		lost, once, dup := number(row["lost"]), number(row["applied_once"]), number(row["duplicated"])
		a.check()
		if sum := lost + once + dup; sum != intents {
			a.experimentFail(RetriesFile, where, "lost+applied_once+duplicated",
				fmt.Sprintf("%d (parameters.intents)", intents), fmt.Sprint(sum))
		}
		for _, f := range want.zero {
			a.check()
			if n := number(row[f]); n != 0 {
				a.experimentFail(RetriesFile, where, f, "0", fmt.Sprint(n))
			}
		}
		for _, f := range want.positive {
			a.check()
			if n := number(row[f]); n <= 0 {
				a.experimentFail(RetriesFile, where, f, "> 0", fmt.Sprint(n))
			}
		}
	}
}

// number returns a decoded JSON integer (json.Number), 0 for anything else;
// schema validation has already required integers.
func number(v any) int64 {
	n, _ := v.(json.Number)
	i, _ := n.Int64()
	return i
}

// The jitter model's constants, from the design. jitter.json must hold
// exactly these parameters; the audit recomputes the model from them.
var jitterParams = []struct {
	name  string
	value int64
}{
	{"seed", 42}, {"clients", 1000}, {"retries", 5}, {"base_ms", 100}, {"cap_ms", 10000}, {"bucket_ms", 10},
}

// jitterOrder is the order the design runs the strategies in.
var jitterOrder = []string{"none", "full", "equal", "decorrelated"}

// checkJitter recomputes the jitter model with the audit's own code and
// compares every strategy's peak, total and buckets with jitter.json.
func (a *auditor) checkJitter(doc map[string]any) {
	params, _ := doc["parameters"].(map[string]any)
	for _, p := range jitterParams {
		a.check()
		if got := number(params[p.name]); got != p.value {
			a.experimentFail(JitterFile, "parameters", p.name, fmt.Sprint(p.value), fmt.Sprint(got))
		}
	}
	want := stormModel()
	got, _ := doc["strategies"].([]any)
	for i, w := range want {
		a.check()
		if i >= len(got) {
			a.failf(CheckExperiment, "%s: strategy %s: missing", JitterFile, jitterOrder[i])
			continue
		}
		s, _ := got[i].(map[string]any)
		where := "strategy " + jitterOrder[i]
		if name, _ := str(s, "name"); name != jitterOrder[i] {
			a.experimentFail(JitterFile, fmt.Sprintf("strategies[%d]", i), "name", fmt.Sprintf("%q", jitterOrder[i]), fmt.Sprintf("%q", name))
			continue
		}
		a.check()
		if p := number(s["peak"]); p != int64(w.peak) {
			a.experimentFail(JitterFile, where, "peak", fmt.Sprint(w.peak), fmt.Sprint(p))
		}
		a.check()
		if t := number(s["total"]); t != int64(w.total) {
			a.experimentFail(JitterFile, where, "total", fmt.Sprint(w.total), fmt.Sprint(t))
		}
		a.check()
		buckets, _ := s["buckets"].([]any)
		if len(buckets) != len(w.buckets) {
			a.experimentFail(JitterFile, where, "buckets", fmt.Sprintf("%d buckets", len(w.buckets)), fmt.Sprintf("%d", len(buckets)))
			continue
		}
		for b, c := range w.buckets {
			if n := number(buckets[b]); n != int64(c) {
				a.experimentFail(JitterFile, where, fmt.Sprintf("buckets[%d]", b), fmt.Sprint(c), fmt.Sprint(n))
				break // one line per strategy: the first bucket that differs
			}
		}
	}
	if len(got) > len(want) {
		a.failf(CheckExperiment, "%s: strategies: expected %d, observed %d", JitterFile, len(want), len(got))
	}
}

// stormResult is one strategy's histogram as the audit computes it.
type stormResult struct {
	peak, total int
	buckets     []int
}

// stormModel is the audit's own implementation of the design's jitter
// model, written apart from the lab's: 1000 clients fail at t = 0 and
// retry 5 times each; before retry n (from 0) a client waits a delay, its
// clock adds the delay, and the retry lands in bucket floor(clock / 10).
// Strategies, base 100, cap 10 000: none min(cap, base·2^n); full
// r·min(cap, base·2^n); equal d/2 + r·d/2 with d = min(cap, base·2^n);
// decorrelated min(cap, base + r·(prev·3 − base)), prev the previous delay
// (base at first). One mulberry32 stream, seed 42, is drawn in strategy
// order, then client order; "none" draws nothing.
func stormModel() []stormResult {
	const (
		clients, retries = 1000, 5
		base, ceiling    = 100.0, 10000.0
		width            = 10.0
	)
	rng := mulberry(42)
	out := make([]stormResult, 0, len(jitterOrder))
	for _, strategy := range jitterOrder {
		var hist []int
		for c := 0; c < clients; c++ {
			clock, prev := 0.0, base
			for n := 0; n < retries; n++ {
				step := math.Min(ceiling, base*float64(uint64(1)<<n))
				var delay float64
				switch strategy {
				case "none":
					delay = step
				case "full":
					delay = rng() * step
				case "equal":
					delay = step/2 + rng()*step/2
				case "decorrelated":
					delay = math.Min(ceiling, base+rng()*(prev*3-base))
				}
				prev = delay
				clock += delay
				b := int(math.Floor(clock / width))
				for len(hist) <= b {
					hist = append(hist, 0)
				}
				hist[b]++
			}
		}
		r := stormResult{buckets: hist}
		for _, n := range hist {
			r.total += n
			if n > r.peak {
				r.peak = n
			}
		}
		out = append(out, r)
	}
	return out
}

// mulberry returns the mulberry32 generator seeded with seed: each call
// gives the next draw in [0, 1). uint32 arithmetic wraps mod 2^32, as
// JavaScript's Math.imul and |0 do.
func mulberry(seed uint32) func() float64 {
	state := seed
	return func() float64 {
		state += 0x6D2B79F5
		z := state
		z = (z ^ (z >> 15)) * (z | 1)
		z ^= z + (z^(z>>7))*(z|61)
		return float64(z^(z>>14)) / 4294967296
	}
}

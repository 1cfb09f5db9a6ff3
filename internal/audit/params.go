package audit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A knobFlag is one runner flag that changes an experiment's parameter,
// or the runs on targets (the audit's copy of cmd/runner's knobs,
// docs/bounds.md), recorded in manifest.flags when set: every parameter is
// pinned to its default unless a recorded flag changed it.
type knobFlag struct {
	flag        string   // the runner's flag, without the dash
	experiments []string // the experiments whose parameter it sets
	targets     bool     // it sets a parameter of the runs on targets
	param       string   // the parameter it sets ("seed": the seed)
	lo, hi      int64    // its range (a duration's in milliseconds)
	duration    bool     // a Go duration ("1s"), recorded in milliseconds
}

var knobFlags = []knobFlag{
	{flag: "seed", experiments: []string{"retries", "chaos"}, param: "seed", lo: 0, hi: maxInt},
	{flag: "intents", experiments: []string{"retries"}, param: "intents", lo: 1, hi: 10000},
	{flag: "drop-percent", experiments: []string{"retries"}, param: "drop_percent", lo: 0, hi: 100},
	{flag: "timeout-ms", experiments: []string{"retries"}, param: "client_timeout_ms", lo: 1, hi: 60000},
	{flag: "attempts", experiments: []string{"retries"}, param: "max_attempts", lo: 1, hi: 100},
	{flag: "workers", experiments: []string{"retries"}, param: "workers", lo: 1, hi: 64},
	{flag: "deadline-ms", experiments: []string{"retries"}, param: "total_deadline_ms", lo: 0, hi: 600000},
	{flag: "duration", experiments: []string{"chaos"}, param: "duration_ms", lo: 1, hi: 600000, duration: true},
	{flag: "clients", experiments: []string{"chaos"}, param: "clients", lo: 1, hi: 64},
	{flag: "replicas", experiments: []string{"chaos"}, param: "replicas", lo: 1, hi: 4},
	{flag: "trials", targets: true, param: "trials", lo: 1, hi: maxTrials},
	{flag: "chaos-trials", experiments: []string{"chaos"}, param: "chaos_trials", lo: 1, hi: maxChaosTrials},
}

// maxTrials bounds the trials of a case on a target (runner -trials); the
// audit's copy of the runner's MaxTrials.
const maxTrials = 50

// applies reports whether k sets a parameter of a run that selected the
// experiments and targets given.
func (k knobFlag) applies(experiments, targets []string) bool {
	return k.targets && len(targets) > 0 || slices.ContainsFunc(k.experiments, func(e string) bool { return slices.Contains(experiments, e) })
}

// trials is how many times each case ran on each target: manifest.flags'
// trials, or one (evidence from before trials).
func (a *auditor) trials() int {
	v, _ := a.expected("trials", 1)
	return int(v)
}

// A param is one of an experiment's parameters and its value.
type param struct {
	name  string
	value int64
}

// defaultSeed is the runner's -seed default.
const defaultSeed = 1

// chaosParams are the chaos experiment's parameters as the design sets
// them (the audit's copy), unless manifest.flags records a knob.
var chaosParams = []param{
	{"replicas", 2}, {"clients", 8}, {"duration_ms", 3000}, {"max_attempts", 8}, {"intent_within_ms", 3000},
	{"attempt_timeout_ms", 250}, {"quiet_within_ms", 15000}, {"quiet_attempts", 40}, {"kill_every_ms", 500},
	{"server_wait_ms", 150}, {"max_intents", 50000}, {"max_history", 300000},
}

// targetDurationMS is the chaos phase on a target unless -duration sets it
// (the audit's copy of the runner's DefaultTargetDuration).
const targetDurationMS = 1500

// readFlags checks manifest.flags: each a knob of a selected experiment,
// its value as the runner writes it, within range; it keeps the valid ones
// by parameter for expected.
func (a *auditor) readFlags() {
	a.flagValues = map[string]int64{}
	raw := mapOf(a.manifest, "flags")
	selected, targets := a.selected("experiments"), a.selected("targets")
	fail := func(name, format string, args ...any) { a.manifestFail("flags."+name, format, args...) }
	for _, name := range sortedKeys(raw) {
		a.check()
		s, _ := raw[name].(string)
		i := slices.IndexFunc(knobFlags, func(k knobFlag) bool { return k.flag == name })
		if i < 0 {
			var names []string
			for _, k := range knobFlags {
				names = append(names, k.flag)
			}
			fail(name, "not a knob the runner records (%s)", strings.Join(names, ", "))
			continue
		}
		k := knobFlags[i]
		if !k.applies(selected, targets) {
			what := "selection.experiments runs no " + strings.Join(k.experiments, " or ")
			if k.targets {
				what = "selection.targets is empty"
			}
			fail(name, "%q recorded, but %s", s, what)
			continue
		}
		v, err := k.parse(s)
		if err != nil {
			fail(name, "%v", err)
			continue
		}
		a.flagValues[k.param] = v
	}
}

// parse reads a recorded flag value, as the runner writes it, in range.
func (k knobFlag) parse(s string) (int64, error) {
	var v int64
	if k.duration {
		d, err := time.ParseDuration(s)
		if err != nil || d.String() != s || d%time.Millisecond != 0 {
			return 0, fmt.Errorf("%q: want a whole number of milliseconds as Go prints a duration (such as 1s or 1.5s)", s)
		}
		v = d.Milliseconds()
	} else {
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil || strconv.FormatUint(u, 10) != s || (k.hi < maxInt && u > uint64(k.hi)) {
			return 0, fmt.Errorf("%q: want a decimal integer in %d..%d", s, k.lo, k.hi)
		}
		v = int64(min(u, uint64(maxInt))) // a seed above 2^63 still pins: compared as text in seedText
	}
	switch out := v < k.lo || v > k.hi; {
	case out && k.duration:
		return 0, fmt.Errorf("%q: outside %s..%s", s, time.Duration(k.lo)*time.Millisecond, time.Duration(k.hi)*time.Millisecond)
	case out:
		return 0, fmt.Errorf("%q: outside %d..%d", s, k.lo, k.hi)
	}
	return v, nil
}

// expected returns the value parameter param must hold (its recorded
// knob's, else def) and where it comes from, for a failure message.
func (a *auditor) expected(param string, def int64) (int64, string) {
	i := slices.IndexFunc(knobFlags, func(k knobFlag) bool { return k.param == param })
	v, recorded := a.flagValues[param]
	switch {
	case i >= 0 && recorded:
		return v, "manifest.json flags." + knobFlags[i].flag
	case i >= 0:
		return def, "the design's; manifest.json flags records no " + knobFlags[i].flag
	}
	return def, "the design's"
}

// seedText is the seed the experiments must have run with, as text.
func (a *auditor) seedText() string {
	if s, ok := mapOf(a.manifest, "flags")["seed"].(string); ok {
		if _, valid := a.flagValues["seed"]; valid {
			return s
		}
	}
	return strconv.Itoa(defaultSeed)
}

// checkSeed checks an experiment's recorded seed against seedText.
func (a *auditor) checkSeed(check Check, store, file, where string, seed any) {
	a.check()
	want := a.seedText()
	if got := render(seed); got != want {
		src := "manifest.json flags.seed"
		if want == strconv.Itoa(defaultSeed) {
			src = "the runner's default; manifest.json flags records no seed"
		}
		a.fail(Failure{Check: check, Store: store, Field: "seed", Expected: want, Observed: got,
			Message: fmt.Sprintf("%s: %sseed: expected %s (%s), observed %s", file, where, want, src, got)})
	}
}

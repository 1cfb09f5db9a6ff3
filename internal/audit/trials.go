package audit

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// This file holds a case's trials on a target (runner -trials): each
// checked and judged as a run of its own, then summed up as the case's
// verdict there, a distribution and not one roll of the dice: how many
// trials showed each safety verdict and each rule, with Wilson 95 %
// intervals, and racy where the trials disagree.

// checkTargetCell checks case c's trials on target tname: the first is rm
// itself, the others rm's further_trials; a case that ran has as many as
// manifest.flags' trials, one that did not run has none further. It
// returns the case as TARGETS.md shows it: its verdict summed up over its
// trials, the example trial's calls, and every trial judged in trials.
func (a *auditor) checkTargetCell(tname string, spec *targetSpec, c *Case, rm map[string]any, results map[string]any) runView {
	held := a.heldTrials(tname, spec, c)
	view := a.checkTargetRun(tname, spec, c, held[0], rm, results)
	further, _ := rm["further_trials"].([]any)
	want := len(held)
	a.check()
	if got := 1 + len(further); got != want {
		_, from := a.expected("trials", 1)
		if view.NotRun != "" {
			from = "a case that does not run has no trials"
		}
		if !a.slice.Whole() {
			from += fmt.Sprintf("; slice %s holds trials %v", a.slice, held)
		}
		a.targetFail(CheckTarget, tname, "runs", "case %s: %s, expected %d (%s)", c.Name, plural(got, "trial"), want, from)
		view.unjudged = true
		return view
	}
	if view.NotRun != "" {
		return view
	}
	trials := []runView{view}
	for k, f := range further {
		fm, _ := f.(map[string]any)
		tm := map[string]any{}
		maps.Copy(tm, fm)
		tm["case"], tm["not_run"] = c.Name, ""
		trials = append(trials, a.checkTargetRun(tname, spec, c, held[k+1], tm, results))
	}
	sum := sumTrials(trials)
	return runView{targetRunVerdict: sum, calls: trials[sum.Example-1].calls, trials: trials}
}

// heldTrials are the trials of case c on target tname (spec) the folder
// holds, 1-based: every trial of manifest.flags' trials, or those of the
// folder's slice (runner -shard); a case that cannot run on the target has
// one record, trial 1's.
func (a *auditor) heldTrials(tname string, spec *targetSpec, c *Case) []int {
	if targetNotRun(c, spec, a.protoInt("capacity")) != "" {
		return a.slice.Trials(tname, c.Name, 1)
	}
	return a.slice.Trials(tname, c.Name, a.trials())
}

// notFiredSafety is a trial's word in trial_safety when a fault placed at
// the effect sink did not fire in it: not judged.
const notFiredSafety = "not_fired"

// all is every trial of the case, the first first; a case that did not
// run is one.
func (r runView) all() []runView {
	if len(r.trials) == 0 {
		return []runView{r}
	}
	return r.trials
}

// judged reports whether every trial of the case was judged.
func (r runView) judged() bool {
	return !slices.ContainsFunc(r.all(), func(t runView) bool { return t.unjudged })
}

// safetyOrder ranks the safety verdicts, the best first.
var safetyOrder = []string{"pass", "limitation", "violation"}

// sumTrials is the case's verdict over its trials: the worst safety verdict
// any trial showed, shown by its first trial that did (the example: its
// effects, findings, deviations and differences from the native run), how
// many trials showed each verdict and each rule, and racy where they
// disagree.
//
// A trial in which a fault did not fire is not judged: the sum is the
// other trials', and a case whose fault fired in none did not run, with
// why.
func sumTrials(trials []runView) targetRunVerdict {
	example := -1
	var tally safetyTally
	var each []string
	var judged []runView
	notFired, why := 0, ""
	for i, t := range trials {
		if t.NotFired > 0 {
			each = append(each, notFiredSafety)
			if notFired++; why == "" {
				why = t.NotFiredWhy
			}
			continue
		}
		judged = append(judged, t)
		if p := tally.field(t.Safety); p != nil {
			*p++
		}
		each = append(each, t.Safety)
		if example < 0 || slices.Index(safetyOrder, t.Safety) > slices.Index(safetyOrder, trials[example].Safety) {
			example = i
		}
	}
	if example < 0 {
		v := trials[0].targetRunVerdict
		v.Safety, v.Findings, v.Deviations, v.Mirror = "", []finding{}, []finding{}, []string{}
		v.NotRun = fmt.Sprintf("not judged: in none of %s did the fault it places fire (%s)", plural(len(trials), "trial"), why)
		v.Trials, v.Example, v.TrialSafety, v.Rates = 0, 1, each, []ruleRate{}
		v.NotFired, v.NotFiredWhy = notFired, why
		return v
	}
	v := trials[example].targetRunVerdict
	v.Trials, v.Example, v.Tally, v.TrialSafety = len(judged), example+1, tally, each
	v.Racy = tally.of(v.Safety) < len(judged)
	v.Rates = ruleRates(judged)
	v.NotFired, v.NotFiredWhy = notFired, why
	return v
}

// A safetyTally counts a case's trials by their safety verdict.
type safetyTally struct {
	Pass       int `json:"pass"`
	Limitation int `json:"limitation"`
	Violation  int `json:"violation"`
}

// field is the count of verdict, nil for a word that is none.
func (t *safetyTally) field(verdict string) *int {
	switch verdict {
	case "pass":
		return &t.Pass
	case "limitation":
		return &t.Limitation
	case "violation":
		return &t.Violation
	}
	return nil
}

// of is how many trials showed verdict.
func (t safetyTally) of(verdict string) int {
	if p := t.field(verdict); p != nil {
		return *p
	}
	return 0
}

// A ruleRate is how many of a case's trials broke one safety rule, with
// the Wilson score interval at 95 % of the rate, in percent.
type ruleRate struct {
	Rule   string  `json:"rule"`
	Trials int     `json:"trials"`
	Of     int     `json:"of"`
	Low    float64 `json:"low_percent"`
	High   float64 `json:"high_percent"`
}

// ruleRates are the safety rules any trial broke, in the order the trials
// first show them, each with how many trials broke it.
func ruleRates(trials []runView) []ruleRate {
	var order []string
	count := map[string]int{}
	for _, t := range trials {
		for _, rule := range findingRules(t.Findings) {
			if count[rule] == 0 {
				order = append(order, rule)
			}
			count[rule]++
		}
	}
	out := []ruleRate{}
	for _, rule := range order {
		lo, hi := wilson(count[rule], len(trials))
		out = append(out, ruleRate{Rule: rule, Trials: count[rule], Of: len(trials), Low: lo, High: hi})
	}
	return out
}

// wilson is the Wilson score interval at 95 % of k successes in n
// trials, in percent rounded to one decimal: unlike k/n ± a normal margin
// it stays within 0..100 and is not zero-wide at 0 or n.
func wilson(k, n int) (lo, hi float64) { return level95.interval(k, n) }

// A level is a confidence level of the Wilson score interval: its name
// as the renderings print it and its normal quantile.
type level struct {
	name string
	z    float64
}

var (
	level95 = level{"95 %", 1.96}
	level99 = level{"99 %", 2.576}
)

// interval is the Wilson score interval at l of k successes in n trials,
// in percent rounded to one decimal.
func (l level) interval(k, n int) (lo, hi float64) {
	if n == 0 {
		return 0, 100
	}
	z := l.z
	p, fn := float64(k)/float64(n), float64(n)
	d := 1 + z*z/fn
	center := (p + z*z/(2*fn)) / d
	half := z * math.Sqrt(p*(1-p)/fn+z*z/(4*fn*fn)) / d
	round := func(x float64) float64 { return math.Round(x*1000) / 10 }
	return round(max(0, center-half)), round(min(1, center+half))
}

// rateText is a count of trials as the renderings show it: "3/10", and
// the interval where there are several trials ("3/10, 11–60 %").
func rateText(k, n int) string {
	if n <= 1 {
		return fmt.Sprintf("%d/%d", k, n)
	}
	lo, hi := wilson(k, n)
	return fmt.Sprintf("%d/%d, %s–%s %%", k, n, percent(lo), percent(hi))
}

// percent prints a rounded percentage without a trailing ".0".
func percent(x float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", x), ".0") }

// trialsLine is the case's trials in words: each verdict's count, the
// interval of the worst, and racy where they disagree; "" for one trial.
func trialsLine(v targetRunVerdict) string {
	if v.Trials <= 1 && v.NotFired == 0 {
		return ""
	}
	var parts []string
	for _, verdict := range slices.Backward(safetyOrder) {
		if n := v.Tally.of(verdict); n > 0 {
			parts = append(parts, fmt.Sprintf("%s in %s", verdict, rateText(n, v.Trials)))
		}
	}
	if v.NotFired > 0 {
		parts = append(parts, fmt.Sprintf("not judged in %d more (a fault did not fire)", v.NotFired))
	}
	s := strings.Join(parts, "; ")
	if v.Racy {
		s = "racy: " + s
	}
	return s
}

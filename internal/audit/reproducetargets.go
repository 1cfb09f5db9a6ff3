package audit

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// This file is what audit -reproduce re-observes on targets: each case's
// trials, as rates beside the re-run's, and what each target did under
// chaos. A target's races are its own, so neither is held to the recorded
// figure. A case's recorded rate is implausible only when its Wilson 99 %
// interval and the re-run's do not overlap (caseLevel): of the 462
// ordered pairs of 22 honest samples of one racy cell (express-idempotency-
// redis's concurrent duplicate on two replicas, 1 to 10 of 10 trials as
// the machine's load went; docs/evidence-and-audit.md), 32 fell apart at
// 95 %, 2 at 99 %; a violation in 8 or more of 10 trials recorded as none
// is still flagged. A chaos finding's rate over a target's chaos trials
// (3 unless told) is judged at 95 % (chaosLevel): at 99 % a forged 0 of 3
// beside 9 of 9 re-observed would overlap.

// caseLevel and chaosLevel are the levels of the intervals that must
// overlap: a case's rate over its trials, and a chaos rule's over a
// target's chaos trials.
var caseLevel, chaosLevel = level99, level95

// RateAgain is one rate of a case on a target, recorded beside the
// re-run's: a safety verdict's or a rule's, as trials out of trials.
type RateAgain struct {
	Target      string `json:"target"`
	Case        string `json:"case"`
	What        string `json:"what"` // a safety verdict, or "rule " and a rule
	Recorded    string `json:"recorded"`
	Again       string `json:"again"`
	Implausible bool   `json:"implausible"`
}

// cellRates are a case's rates on a target, by what they count, with the
// trials they are out of.
type cellRates struct {
	trials int
	count  map[string]int
	order  []string
}

// ratesOf reads a verdicts.json run's rates: each safety verdict's count
// and each rule's. Evidence from before trials (no trials) is one trial.
func ratesOf(run map[string]any) cellRates {
	c := cellRates{trials: int(number(run["trials"])), count: map[string]int{}}
	add := func(what string, n int) {
		if _, ok := c.count[what]; !ok {
			c.order = append(c.order, what)
		}
		c.count[what] += n
	}
	tally := mapOf(run, "tally")
	for _, v := range safetyOrder {
		add(v, int(number(tally[v])))
	}
	if c.trials == 0 {
		c.trials = 1
		safety, _ := str(run, "safety")
		c.count[safety] = 1
	}
	rates, _ := run["rates"].([]any)
	for _, x := range rates {
		m, _ := x.(map[string]any)
		rule, _ := str(m, "rule")
		add("rule "+rule, int(number(m["trials"])))
	}
	return c
}

// targetCells reads verdicts.json's cases on targets that ran, by
// "target/case"; skip names the targets skipped, with why.
func targetCells(dir string) (cells map[string]map[string]any, order []string, skip map[string]string, err error) {
	doc, err := readJSONFile(dir, VerdictsFile, capOf(VerdictsFile))
	if err != nil {
		return nil, nil, nil, err
	}
	cells, skip = map[string]map[string]any{}, map[string]string{}
	targets, _ := doc["targets"].([]any)
	for _, x := range targets {
		t, _ := x.(map[string]any)
		name, _ := str(t, "target")
		if why, _ := str(t, "skipped"); why != "" {
			skip[name] = why
			continue
		}
		runs, _ := t["runs"].([]any)
		for _, y := range runs {
			run, _ := y.(map[string]any)
			if notRun(run) != "" {
				continue
			}
			c, _ := str(run, "case")
			cells[name+"/"+c] = run
			order = append(order, name+"/"+c)
		}
	}
	return cells, order, skip, nil
}

// againTargets sets each recorded case's rates on each target beside the
// re-run that ran the targets (run 1), and flags the implausible ones and
// a case the re-run did not run.
func (r *Reproduction) againTargets(recordedDir string, dirs []string) error {
	rec, order, _, err := targetCells(recordedDir)
	if err != nil || len(order) == 0 {
		return err
	}
	for _, dir := range dirs {
		m, err := readJSONFile(dir, "manifest.json", CapManifest)
		if err != nil {
			return err
		}
		if len(stringList(mapOf(m, "selection"), "targets")) == 0 {
			continue
		}
		again, _, skip, err := targetCells(dir)
		if err != nil {
			return err
		}
		for _, key := range order {
			target, cs, _ := strings.Cut(key, "/")
			if again[key] == nil {
				why := "it did not run there"
				if s := skip[target]; s != "" {
					why = "the target was skipped: " + s
				}
				r.Findings = append(r.Findings, fmt.Sprintf("target %s, case %s: recorded as run, but the re-run in %s did not re-observe it (%s)", target, cs, filepath.Base(filepath.Dir(dir)), why))
				continue
			}
			r.rateAgain(target, cs, ratesOf(rec[key]), ratesOf(again[key]))
		}
	}
	return nil
}

// rateAgain records every rate of a case, recorded (a) and re-run (b),
// that either shows, implausible when their intervals do not overlap.
func (r *Reproduction) rateAgain(target, cs string, a, b cellRates) {
	for _, p := range pairRates(a, b, caseLevel) {
		ra := RateAgain{Target: target, Case: cs, What: p.what, Recorded: p.a, Again: p.b, Implausible: p.apart}
		r.Rates = append(r.Rates, ra)
		if ra.Implausible {
			r.Findings = append(r.Findings, fmt.Sprintf("target %s, case %s: %s recorded in %s trials (%s), re-observed in %s (%s): the intervals do not overlap",
				target, cs, p.what, p.a, p.intervalA, p.b, p.intervalB))
		}
	}
}

// A ratePair is one rate of a case on a target in two samples of its
// trials: each as k/n with its Wilson interval at a level, apart when the
// intervals do not overlap.
type ratePair struct {
	what                 string
	a, b                 string
	intervalA, intervalB string
	apart                bool
}

// pairRates pairs every rate either sample shows, in a's order then b's,
// with their intervals at l.
func pairRates(a, b cellRates, l level) []ratePair {
	var pairs []ratePair
	seen := map[string]bool{}
	for _, what := range slices.Concat(a.order, b.order) {
		ka, kb := a.count[what], b.count[what]
		if seen[what] || ka == 0 && kb == 0 {
			continue
		}
		seen[what] = true
		loA, hiA := l.interval(ka, a.trials)
		loB, hiB := l.interval(kb, b.trials)
		pairs = append(pairs, ratePair{what: what,
			a: fmt.Sprintf("%d/%d", ka, a.trials), b: fmt.Sprintf("%d/%d", kb, b.trials),
			intervalA: fmt.Sprintf("Wilson %s: %s–%s %%", l.name, percent(loA), percent(hiA)),
			intervalB: fmt.Sprintf("%s–%s %%", percent(loB), percent(hiB)),
			apart:     hiA < loB || hiB < loA})
	}
	return pairs
}

// targetChaosAgain checks what a target did under chaos, rule by rule, as
// a rate over its chaos trials: the trials in which the rule fired, the
// recorded run's beside the re-runs' pooled. A target's races are its own
// and a kill's intents fail together, so the trial is the unit (a rate
// over intents would treat one kill's stuck keys as many independent
// rolls): the claim fails only when the two rates' Wilson intervals at
// chaosLevel do not overlap. Each re-run is also shown as agreeing or not
// on whether the rule fired at all.
func (r *Reproduction) targetChaosAgain(target string, rec []map[string]any, again [][]map[string]any) {
	for _, rule := range chaosRules {
		if ruleOf(rec[0], rule) == nil {
			continue
		}
		k0 := trialsFired(rec, rule)
		var held []bool
		pooled := cellRates{count: map[string]int{}}
		for _, trials := range again {
			if len(trials) == 0 {
				continue
			}
			k := trialsFired(trials, rule)
			held = append(held, (k0 > 0) == (k > 0))
			pooled.trials += len(trials)
			pooled.count[rule] += k
		}
		claim := fmt.Sprintf("chaos target %s: no %s (in %s)", target, rule, plural(len(rec), "trial"))
		if k0 > 0 {
			claim = fmt.Sprintf("chaos target %s: %s happens (in %d of %d trials)", target, rule, k0, len(rec))
		}
		c := ClaimAgain{Claim: claim, Held: held, Some: true, Rates: fmt.Sprintf("%d of %d trials | %d of %d", k0, len(rec), pooled.count[rule], pooled.trials)}
		if pooled.trials > 0 {
			recorded := cellRates{trials: len(rec), count: map[string]int{rule: k0}, order: []string{rule}}
			pooled.order = []string{rule}
			if pairs := pairRates(recorded, pooled, chaosLevel); len(pairs) == 1 && pairs[0].apart {
				c.Implausible = true
				r.Findings = append(r.Findings, fmt.Sprintf("%s: implausible: recorded in %s trials (%s), re-observed in %s (%s): the intervals do not overlap",
					claim, pairs[0].a, pairs[0].intervalA, pairs[0].b, pairs[0].intervalB))
			}
		}
		r.Claims = append(r.Claims, c)
	}
}

// trialsFired counts the chaos trials in which rule fired.
func trialsFired(trials []map[string]any, rule string) int {
	n := 0
	for _, t := range trials {
		if number(ruleOf(t, rule)["count"]) > 0 {
			n++
		}
	}
	return n
}

// writeRates prints each case's rates on targets beside the re-run's.
func (r *Reproduction) writeRates(p *printer) {
	if len(r.Rates) == 0 {
		return
	}
	p.f("rates on targets, recorded | re-observed (trials of trials); IMPLAUSIBLE: their Wilson %s intervals do not overlap:\n", caseLevel.name)
	for _, ra := range r.Rates {
		mark := ""
		if ra.Implausible {
			mark = "  IMPLAUSIBLE"
		}
		p.f("  target %s, case %s: %s %s | %s%s\n", ra.Target, ra.Case, ra.What, ra.Recorded, ra.Again, mark)
	}
}

package audit

import (
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
)

// A Gate is what a CI gate reads of the verdicts: the judged runs on
// targets (cases and chaos) that fail it. A safety violation always fails
// it; a limitation (a finding the target's claims excuse) only when
// strict. The lab's own stores are judged against their cases'
// expectations, and a mismatch already fails the audit itself.
type Gate struct {
	Strict   bool
	Failures []string // "target T, case C: violation duplicate_effect in 1 of 1 trial", one a failing case
}

// Gate judges the audit's verdicts for a CI gate (runner -target exits 6
// when it fails).
func (r *Report) Gate(strict bool) Gate {
	g := Gate{Strict: strict}
	if r.verdicts == nil {
		return g
	}
	for _, t := range r.verdicts.Targets {
		for _, run := range t.Runs {
			if gateFails(run.Safety, strict) {
				g.Failures = append(g.Failures, fmt.Sprintf("target %s, case %s: %s %s %s", t.Target, run.Case, run.Safety, strings.Join(findingRules(run.Findings), ", "), verdictRate(run)))
			}
		}
	}
	for _, c := range r.verdicts.Chaos {
		if c.Target == "" || c.NotRun != "" {
			continue
		}
		if c.Violations > 0 || strict && c.Shown > 0 {
			g.Failures = append(g.Failures, fmt.Sprintf("target %s, %s: %s", c.Target, chaosCaseName(c), chaosRuleCounts(c, strict)))
		}
	}
	return g
}

// verdictRate is how many of a case's trials showed its safety verdict:
// "in 4 of 5 trials (Wilson 95 %: 37.6–96.4 %)", "in 1 of 1 trial".
func verdictRate(run targetRunVerdict) string {
	trials := max(run.Trials, 1)
	rate := fmt.Sprintf("in %d of %s", run.Tally.of(run.Safety), plural(trials, "trial"))
	if trials > 1 {
		lo, hi := wilson(run.Tally.of(run.Safety), trials)
		rate += fmt.Sprintf(" (Wilson 95 %%: %s–%s %%)", percent(lo), percent(hi))
	}
	return rate
}

// Failed reports whether the gate failed.
func (g Gate) Failed() bool { return len(g.Failures) > 0 }

// gateFails reports whether a run with this safety verdict fails the gate.
func gateFails(safety string, strict bool) bool {
	return safety == "violation" || strict && safety == "limitation"
}

// findingRules are the distinct rules of findings, in order.
func findingRules(fs []finding) []string {
	var rules []string
	for _, f := range fs {
		if !slices.Contains(rules, f.Rule) {
			rules = append(rules, f.Rule)
		}
	}
	return rules
}

// chaosRuleCounts names the chaos rules that fired and how often: the
// promised ones, and with strict the excused ones too.
func chaosRuleCounts(c ChaosVerdict, strict bool) string {
	var parts []string
	for _, r := range c.Rules {
		if r.Count > 0 && (r.Promised || strict) {
			kind := "violation"
			if !r.Promised {
				kind = "limitation"
			}
			parts = append(parts, fmt.Sprintf("%s %s ×%d", kind, r.Rule, r.Count))
		}
	}
	return strings.Join(parts, ", ")
}

// The JUnit XML report, as CI systems read it: a testsuite per target and
// per store, a testcase per case (and one for a target's chaos run).
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Skipped  int          `xml:"skipped,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name     string      `xml:"name,attr"`
		Tests    int         `xml:"tests,attr"`
		Failures int         `xml:"failures,attr"`
		Errors   int         `xml:"errors,attr"`
		Skipped  int         `xml:"skipped,attr"`
		Cases    []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		Failure   *junitOutcome `xml:"failure,omitempty"`
		Skipped   *junitOutcome `xml:"skipped,omitempty"`
		SystemOut string        `xml:"system-out,omitempty"`
	}
	junitOutcome struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr,omitempty"`
		Text    string `xml:",chardata"`
	}
)

// JUnit renders the verdicts as a JUnit XML report: a failure for each
// run that fails the gate (strict as Gate), skipped for a case not run
// with its reason; every run's findings, excused ones and conformance
// deviations in its system-out (testcase properties are not read by every
// CI system, nor allowed by the Ant schema most of them follow), each on
// one line: what a target sent has its controls made visible (oneLine),
// where encoding/xml would write U+FFFD for one XML cannot hold.
func (r *Report) JUnit(strict bool) ([]byte, error) {
	if r.verdicts == nil {
		return nil, fmt.Errorf("no verdicts to report: the audit did not judge the runs")
	}
	out := junitSuites{Name: "idemlab"}
	for _, t := range r.verdicts.Targets {
		out.add(r.targetSuite(t, strict))
	}
	for _, s := range storeSuites(r.verdicts.Stores, r.caseSummaries) {
		out.add(s)
	}
	data, err := xml.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the JUnit report: %w", err)
	}
	return append([]byte(xml.Header), append(data, '\n')...), nil
}

// add appends s and counts it into the totals.
func (s *junitSuites) add(suite junitSuite) {
	suite.Tests = len(suite.Cases)
	for _, c := range suite.Cases {
		switch {
		case c.Failure != nil:
			suite.Failures++
		case c.Skipped != nil:
			suite.Skipped++
		}
	}
	s.Tests, s.Failures, s.Skipped = s.Tests+suite.Tests, s.Failures+suite.Failures, s.Skipped+suite.Skipped
	s.Suites = append(s.Suites, suite)
}

// targetSuite is one target's cases, and its chaos run when it had one.
func (r *Report) targetSuite(t targetVerdict, strict bool) junitSuite {
	suite := junitSuite{Name: "target " + t.Target}
	class := "idemlab.target." + t.Target
	if t.Skipped != "" {
		suite.Cases = append(suite.Cases, junitCase{Name: "target", Classname: class, Skipped: &junitOutcome{Message: "skipped: " + oneLine(t.Skipped)}})
		return suite
	}
	for _, run := range t.Runs {
		suite.Cases = append(suite.Cases, targetCase(class, run, r.caseSummaries[run.Case], strict))
	}
	for _, c := range r.verdicts.Chaos {
		if c.Target == t.Target {
			suite.Cases = append(suite.Cases, chaosCase(class, c, strict))
		}
	}
	return suite
}

// targetCase is one case on a target.
func targetCase(class string, run targetRunVerdict, summary string, strict bool) junitCase {
	c := junitCase{Name: run.Case, Classname: class}
	var out strings.Builder
	fmt.Fprintf(&out, "%s\n", summary)
	if run.NotRun != "" {
		c.Skipped = &junitOutcome{Message: "not run: " + oneLine(run.NotRun)}
		c.SystemOut = out.String()
		return c
	}
	rate := verdictRate(run)
	fmt.Fprintf(&out, "safety: %s %s; effects %d (a sound implementation: %d)\n", run.Safety, rate, run.Effects, run.SoundEffects)
	if line := trialsLine(run); line != "" {
		fmt.Fprintf(&out, "trials: %s; each: %s; the findings below are trial %d's\n", line, strings.Join(run.TrialSafety, ", "), run.Example)
		for _, rr := range run.Rates {
			fmt.Fprintf(&out, "rate of %s: %s\n", rr.Rule, rateText(rr.Trials, rr.Of))
		}
	}
	for _, f := range run.Findings {
		kind := "violation"
		if f.Limitation != "" {
			kind = "limitation (" + oneLine(f.Limitation) + ")"
		}
		fmt.Fprintf(&out, "%s %s%s: %s\n", kind, f.Rule, callAt(f.Call), oneLine(f.Detail))
	}
	for _, d := range run.Deviations {
		fmt.Fprintf(&out, "conformance %s%s: %s\n", d.Rule, callAt(d.Call), oneLine(d.Detail))
	}
	for _, m := range run.Mirror {
		fmt.Fprintf(&out, "mirror: %s\n", oneLine(m))
	}
	if gateFails(run.Safety, strict) {
		rules := strings.Join(findingRules(run.Findings), ", ")
		c.Failure = &junitOutcome{Message: fmt.Sprintf("%s %s %s", run.Safety, rules, rate), Type: rules, Text: out.String()}
	}
	c.SystemOut = out.String()
	return c
}

// chaosCaseName names a target's chaos run: "chaos", or "chaos trial N"
// for one of its trials.
func chaosCaseName(v ChaosVerdict) string {
	if v.Trial > 0 {
		return fmt.Sprintf("chaos trial %d", v.Trial)
	}
	return "chaos"
}

// chaosCase is a target's chaos run, or one of its trials.
func chaosCase(class string, v ChaosVerdict, strict bool) junitCase {
	c := junitCase{Name: chaosCaseName(v), Classname: class}
	if v.NotRun != "" {
		c.Skipped = &junitOutcome{Message: "not run: " + oneLine(v.NotRun)}
		return c
	}
	var out strings.Builder
	for _, r := range v.Rules {
		fmt.Fprintf(&out, "%s: %d (promised never: %v)\n", r.Rule, r.Count, r.Promised)
	}
	for _, f := range v.Findings {
		fmt.Fprintf(&out, "%s (intent %d, key %s): %s\n", f.Rule, f.Intent, oneLine(f.Key), oneLine(f.Detail))
	}
	if v.Violations > 0 || strict && v.Shown > 0 {
		c.Failure = &junitOutcome{Message: chaosRuleCounts(v, strict), Type: "chaos", Text: out.String()}
	}
	c.SystemOut = out.String()
	return c
}

// storeSuites are the lab server's runs on its stores, a suite per store:
// a run that does not show what its case expects is a failure.
func storeSuites(runs []storeVerdict, summaries map[string]string) []junitSuite {
	var suites []junitSuite
	for _, v := range runs {
		i := slices.IndexFunc(suites, func(s junitSuite) bool { return s.Name == "store "+v.Store })
		if i < 0 {
			i = len(suites)
			suites = append(suites, junitSuite{Name: "store " + v.Store})
		}
		c := junitCase{Name: v.Case, Classname: "idemlab.store." + v.Store, SystemOut: summaries[v.Case] + "\n"}
		if !v.Matches {
			lines := make([]string, len(v.Mismatches))
			for j, m := range v.Mismatches {
				lines[j] = oneLine(m)
			}
			c.Failure = &junitOutcome{Message: "does not show what its case expects", Type: "expectation", Text: strings.Join(lines, "\n")}
		}
		suites[i].Cases = append(suites[i].Cases, c)
	}
	return suites
}

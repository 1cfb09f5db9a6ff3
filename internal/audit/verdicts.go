package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// VerdictsFile is the audit's verdicts, for machines: every run on a
// store, every run on a target and every chaos run, judged. The renderings
// a person reads say the same in words.
const VerdictsFile = "verdicts.json"

// verdictsVersion is the version of schema/verdicts.schema.json.
const verdictsVersion = 1

type verdictsDoc struct {
	SchemaVersion int             `json:"schema_version"`
	Stores        []storeVerdict  `json:"stores"`
	Targets       []targetVerdict `json:"targets"`
	Chaos         []ChaosVerdict  `json:"chaos"`
}

// storeVerdict is one run on a store: whether it shows what its case expects.
type storeVerdict struct {
	Case       string   `json:"case"`
	Store      string   `json:"store"`
	Matches    bool     `json:"matches"`
	Mismatches []string `json:"mismatches"`
	applied    string   // the effects applied, as REPORT.md's grid shows them
}

// targetVerdict is one target's runs, judged.
type targetVerdict struct {
	Target  string             `json:"target"`
	Skipped string             `json:"skipped"`
	Runs    []targetRunVerdict `json:"runs"`
}

// targetRunVerdict is one case on a target: not run (why), or its safety
// verdict and effects against a sound implementation's, its findings, its
// conformance deviations and a mirror's differences from the native run.
type targetRunVerdict struct {
	Case         string    `json:"case"`
	NotRun       string    `json:"not_run"`
	Safety       string    `json:"safety"`
	Effects      int64     `json:"effects"`
	SoundEffects int64     `json:"sound_effects"`
	Findings     []finding `json:"findings"`
	Deviations   []finding `json:"deviations"`
	Mirror       []string  `json:"mirror"`
	// Over the case's trials (trials.go; a case that did not run has
	// none): how many ran, each one's safety verdict and their tally, racy
	// where they disagree, and each rule broken with its rate. Safety is
	// the worst any trial showed, and the fields above are those of the
	// example, the first trial that showed it (1-based).
	Trials      int         `json:"trials"`
	Example     int         `json:"example_trial"`
	TrialSafety []string    `json:"trial_safety"`
	Tally       safetyTally `json:"tally"`
	Racy        bool        `json:"racy"`
	Rates       []ruleRate  `json:"rates"`
	// NotFired counts the trials not judged because a fault placed at the
	// effect sink did not fire in them (faultsfired.go), NotFiredWhy the
	// first one's reason; Trials, the tally and the rates count the others.
	NotFired    int    `json:"not_fired"`
	NotFiredWhy string `json:"not_fired_why"`
}

// A finding is one rule a run on a target broke (Call nil: the whole run).
type finding struct {
	Rule       string `json:"rule"`
	Call       *int   `json:"call"`
	Detail     string `json:"detail"`
	Limitation string `json:"limitation,omitempty"`
}

// A ChaosVerdict is one chaos run, judged from its history: what the
// checker counted and found, by the claims of its store or target.
type ChaosVerdict struct {
	Store          string               `json:"store"`
	Target         string               `json:"target"`
	Trial          int                  `json:"trial,omitempty"` // on a target, which of its chaos trials, from 1
	NotRun         string               `json:"not_run"`
	Counts         map[string]int64     `json:"counts"`
	Faults         map[string]int64     `json:"faults"`
	SinkFaults     map[string]SinkFault `json:"sink_faults"`
	OK             bool                 `json:"ok"`
	Violations     int64                `json:"violations"`
	Shown          int64                `json:"shown"`
	Rules          []ChaosRuleVerdict   `json:"rules"`
	Findings       []ChaosFinding       `json:"findings"`
	FindingsListed int                  `json:"findings_listed"`
}

// A ChaosRuleVerdict is one rule's line: promised never to fire, and its count.
type ChaosRuleVerdict struct {
	Rule     string `json:"rule"`
	Promised bool   `json:"promised"`
	Count    int64  `json:"count"`
}

// A ChaosFinding is one finding of a chaos run: its rule, the intent it
// is about (-1: the journal), the intent's key, and what happened.
type ChaosFinding struct {
	Rule   string `json:"rule"`
	Intent int64  `json:"intent"`
	Key    string `json:"key"`
	Detail string `json:"detail"`
}

// maxChaosListed bounds the findings a chaos verdict lists.
const maxChaosListed = 100

// targetVerdictOf is a judged target as verdicts.json records it.
func targetVerdictOf(v *targetView) targetVerdict {
	out := targetVerdict{Target: v.name, Skipped: v.skipped, Runs: []targetRunVerdict{}}
	for _, r := range v.runs {
		rv := r.targetRunVerdict
		rv.Findings, rv.Deviations, rv.Mirror = orEmpty(rv.Findings), orEmpty(rv.Deviations), orEmpty(rv.Mirror)
		rv.TrialSafety, rv.Rates = orEmpty(rv.TrialSafety), orEmpty(rv.Rates)
		out.Runs = append(out.Runs, rv)
	}
	return out
}

// chaosVerdictOf is a judged chaos history as verdicts.json records it.
func chaosVerdictOf(sub chaosSubject, h *chaosHistory, c chaosCheck) ChaosVerdict {
	v := ChaosVerdict{Store: sub.store, Target: sub.target, Trial: sub.trial, Counts: c.counts, Faults: c.faults, SinkFaults: h.sinkFaults, Rules: []ChaosRuleVerdict{}, Findings: []ChaosFinding{}}
	if v.SinkFaults == nil {
		v.SinkFaults = map[string]SinkFault{}
	}
	for _, rule := range chaosRules {
		n := c.fired[rule]
		if h.promised(rule) {
			v.Violations += n
		} else {
			v.Shown += n
		}
		v.Rules = append(v.Rules, ChaosRuleVerdict{rule, h.promised(rule), n})
	}
	for _, promised := range []bool{true, false} {
		for _, f := range c.findings {
			if h.promised(f.rule) == promised && len(v.Findings) < maxChaosListed {
				v.Findings = append(v.Findings, ChaosFinding{f.rule, f.intent, f.key, f.detail})
			}
		}
	}
	v.FindingsListed, v.OK = len(v.Findings), v.Violations == 0
	return v
}

// deriveVerdicts writes verdicts.json from the verdicts recorded.
func (a *auditor) deriveVerdicts() {
	if !a.slice.Whole() {
		return // a slice is judged once merged
	}
	doc := verdictsDoc{SchemaVersion: verdictsVersion, Stores: orEmpty(a.storeVerdicts), Targets: orEmpty(a.targetVerdicts), Chaos: orEmpty(a.chaosVerdicts)}
	a.report.verdicts, a.report.caseSummaries = &doc, map[string]string{}
	for _, c := range a.allCases {
		a.report.caseSummaries[c.Name] = c.Summary
	}
	data, err := marshalEvidence(doc)
	if err != nil {
		a.failf(CheckDerived, "%s: cannot encode: %v", VerdictsFile, err)
		return
	}
	a.emit(VerdictsFile, data)
}

// marshalEvidence encodes v as the audit writes JSON (indented, no HTML escaping).
func marshalEvidence(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return buf.Bytes(), nil
}

// orEmpty is s, or an empty slice for nil: a list JSON writes as [].
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

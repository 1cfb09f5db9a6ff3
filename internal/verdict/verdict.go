// Package verdict judges a run of a case on a target, a service the lab did
// not write, in two families kept apart in types, evidence and report:
//
//   - safety: the effects applied against what a sound implementation
//     applies (the case's sound store's expectation), another body answered
//     with the first one's result, a failure stored and replayed, a key left
//     in progress, a retry never answered, a replay of a wrong value. A
//     finding a claim explains (no durable store, and the case restarts or
//     crashes the process) is a limitation, not a violation;
//   - conformance to the IETF Idempotency-Key draft: 422 for another body,
//     409 with Retry-After while in flight, 400 for a malformed key, a body
//     limit, a replay marker. Deviations are reported, never safety failures.
//
// It judges by property, not by transcript: a target that answers 409 where
// the lab's server waits and replays is conformant; an effect applied twice
// is a safety failure. The audit re-derives every verdict with its own code.
package verdict

import (
	"fmt"
	"slices"
	"strings"

	"idemlab/internal/casefile"
	"idemlab/internal/protocol"
	"idemlab/internal/results"
	"idemlab/internal/target"
)

// The rules, safety first. Case files name the ones they test.
const (
	DuplicateEffect   = "duplicate_effect"
	LostEffect        = "lost_effect"
	OtherBodyReplayed = "other_body_replayed"
	StoredFailure     = "stored_failure"
	StuckKey          = "stuck_key"
	RetryFailed       = "retry_failed"
	WrongValue        = "wrong_value"

	ConflictStatus = "conflict_status"
	InFlightStatus = "in_flight_status"
	RetryAfter     = "retry_after"
	MalformedKey   = "malformed_key"
	BodyLimit      = "body_limit"
	CapacityStatus = "capacity_status"
	ReplayMarker   = "replay_marker"
)

// Safety is a run's safety verdict.
type Safety string

// The safety verdicts.
const (
	Pass       Safety = "pass"       // no safety finding
	Limitation Safety = "limitation" // every finding is one a claim of the target explains
	Violation  Safety = "violation"  // a finding no claim explains
)

// A Finding is one rule a run broke: a safety finding or a conformance
// deviation. Call is the index of the call it is about (nil: the run).
type Finding struct {
	Rule   string `json:"rule"`
	Call   *int   `json:"call"`
	Detail string `json:"detail"`
	// Limitation, for a safety finding, is the claim that explains it.
	Limitation string `json:"limitation,omitempty"`
}

// A Verdict is the judgement of one run.
type Verdict struct {
	Safety       Safety    `json:"safety"`
	Effects      int64     `json:"effects"`
	SoundEffects int64     `json:"sound_effects"`
	Findings     []Finding `json:"findings"`
	Deviations   []Finding `json:"deviations"`
}

// Judged is what of a target the verdict depends on.
type Judged struct {
	Claims target.Claims
	Marker bool // the target declares a replay marker
}

// For returns what of t the verdict depends on.
func For(t *target.Target) Judged { return Judged{Claims: t.Claims, Marker: t.Replay != nil} }

// notDurable is the limitation that explains a finding of a case that
// restarts or crashes the process on a target without a durable store.
const notDurable = "the target claims no durable store: a restart or a crash forgets its keys"

// NotRun says why case c cannot run on target t ("" when it can): a case
// without a target section, the lab server's own ledger or key expiry,
// replicas without a shared store, a capacity or body limit the target does
// not claim, or a fault that cannot be placed on it.
func NotRun(c casefile.Case, t *target.Target) string {
	switch {
	case c.Target.Sound == "":
		return "the case file has no target section"
	case c.Ledger != nil:
		return "the case drives the lab server's own ledger (its downstream mode)"
	case c.Server.KeyTTLMS > 0:
		return fmt.Sprintf("the case needs keys that expire after %d ms; targets claim no key TTL", c.Server.KeyTTLMS)
	case c.Replicas > 1 && !t.Claims.SharedStore:
		return fmt.Sprintf("the case runs %d replicas; the target claims no shared store", c.Replicas)
	}
	sound := c.Expect[c.Target.Sound].Expand()
	plan := c.Plan()
	capacity := cmpOr(c.Server.Capacity, protocol.DefaultCapacity)
	needsCapacity := c.Server.Capacity > 0
	for i, e := range sound {
		switch status(e.Status) {
		case 429:
			needsCapacity = true
		case 413:
			if m := t.Claims.MaxBody; m != nil && *m >= int64(plan[i].BodyLen) {
				return fmt.Sprintf("the case expects a %d-byte body to be refused; the target claims max_body %d", plan[i].BodyLen, *m)
			}
		}
	}
	if needsCapacity && (t.Claims.Capacity == nil || *t.Claims.Capacity != capacity) {
		claimed := "none"
		if t.Claims.Capacity != nil {
			claimed = fmt.Sprint(*t.Claims.Capacity)
		}
		return fmt.Sprintf("the case needs a capacity of %d keys; the target claims %s", capacity, claimed)
	}
	for _, p := range plan {
		if _, err := t.Place(p.Fault); err != nil {
			return strings.TrimPrefix(err.Error(), target.ErrNotPlaceable.Error()+": ")
		}
	}
	return ""
}

// Judge judges run, an observed run of case c on a target described by j.
// An error means run does not line up with c's steps: the lab broke.
func Judge(c casefile.Case, j Judged, run results.Run) (Verdict, error) {
	sound, ok := c.Expect[c.Target.Sound]
	if !ok {
		return Verdict{}, fmt.Errorf("case %s: no sound expectation (target.sound %q)", c.Name, c.Target.Sound)
	}
	exp, plan, obs := sound.Expand(), c.Plan(), run.Calls
	if len(exp) != len(obs) || len(plan) != len(obs) {
		return Verdict{}, fmt.Errorf("case %s: %d calls observed, the steps make %d", c.Name, len(obs), len(plan))
	}
	v := Verdict{Effects: run.Counter, SoundEffects: sound.Counter, Findings: []Finding{}, Deviations: []Finding{}}
	deviate := func(rule string, call int, format string, args ...any) {
		v.Deviations = append(v.Deviations, Finding{Rule: rule, Call: &call, Detail: fmt.Sprintf(format, args...)})
	}

	// Input the sound implementation refuses and the target took is a
	// deviation, and an effect the sound count does not hold; every value
	// after it is then shifted, so values are not judged.
	sound0 := v.SoundEffects
	for i := range obs {
		if !answered(obs[i], 200) {
			continue
		}
		switch status(exp[i].Status) {
		case 400:
			v.SoundEffects++
			deviate(MalformedKey, i, "key %s was accepted; the draft asks for 400", describeKey(plan[i].Key))
		case 413:
			v.SoundEffects++
			deviate(BodyLimit, i, "a %d-byte body was accepted; a sound implementation refuses it with 413", plan[i].BodyLen)
		case 429:
			v.SoundEffects++
			deviate(CapacityStatus, i, "a new key beyond the claimed capacity was accepted; 429 was due")
		}
	}

	limitation := ""
	if c.LosesProcess() && !j.Claims.Durable {
		limitation = notDurable
	}
	switch {
	case v.Effects > v.SoundEffects:
		v.Findings = append(v.Findings, Finding{Rule: DuplicateEffect, Limitation: limitation,
			Detail: fmt.Sprintf("%d effects applied; a sound implementation applies %d", v.Effects, v.SoundEffects)})
	case v.Effects < v.SoundEffects:
		v.Findings = append(v.Findings, Finding{Rule: LostEffect, Limitation: limitation,
			Detail: fmt.Sprintf("%d effects applied; a sound implementation applies %d", v.Effects, v.SoundEffects)})
	}
	find := func(rule string, call int, format string, args ...any) {
		v.Findings = append(v.Findings, Finding{Rule: rule, Call: &call, Detail: fmt.Sprintf(format, args...), Limitation: limitation})
	}

	for i := range obs {
		o, e := obs[i], exp[i]
		switch {
		case status(e.Status) == 422 && o.Outcome == protocol.OutcomeReply:
			if s := *o.Status; s >= 200 && s < 300 {
				find(OtherBodyReplayed, i, "another body with key %s was answered %d %s: it got the first request's result (a sound implementation answers 422)", describeKey(plan[i].Key), s, quoteBody(o.Body))
			} else if s != 422 {
				deviate(ConflictStatus, i, "another body with key %s was answered %d; the draft asks for 422", describeKey(plan[i].Key), s)
			}
		case plan[i].Group >= 0 && status(e.Status) == 200 && o.Outcome == protocol.OutcomeReply && *o.Status != 200 && *o.Status != 409:
			deviate(InFlightStatus, i, "a duplicate in flight was answered %d; the draft asks for 409 (the lab's server waits and replays)", *o.Status)
		}
		if answered(o, 409) && o.RetryAfter == nil {
			deviate(RetryAfter, i, "409 without Retry-After")
		}
	}
	v.Deviations = append(v.Deviations, markers(j, exp, obs)...)

	// The last call of each key is where a sound implementation answers
	// the intent; what the target answered there is the intent's fate.
	counted := v.Effects == v.SoundEffects && v.SoundEffects == sound0
	for _, i := range lastCalls(plan) {
		o, e := obs[i], exp[i]
		if e.Outcome != protocol.OutcomeReply || status(e.Status) != 200 {
			continue
		}
		key := describeKey(plan[i].Key)
		switch {
		case o.Outcome != protocol.OutcomeReply:
			find(RetryFailed, i, "the last call with key %s got no reply (%s); a sound implementation answers 200", key, o.Outcome)
		case *o.Status == 409:
			find(StuckKey, i, "the last call with key %s got 409: the key was left in progress (a sound implementation answers 200)", key)
		case *o.Status >= 500 && earlierSame(plan, obs, i):
			find(StoredFailure, i, "the last call with key %s got the earlier %d %s back: a failure was stored as the key's result", key, *o.Status, quoteBody(o.Body))
		case *o.Status != 200:
			find(RetryFailed, i, "the last call with key %s got %d; a sound implementation answers 200", key, *o.Status)
		case counted && e.Body != nil && (o.Body == nil || *o.Body != *e.Body):
			find(WrongValue, i, "the last call with key %s answered %s; a sound implementation answers %q", key, quoteBody(o.Body), *e.Body)
		}
	}

	v.Safety = Pass
	for _, f := range v.Findings {
		if f.Limitation == "" {
			v.Safety = Violation
			break
		}
		v.Safety = Limitation
	}
	return v, nil
}

// markers reports the replay-marker deviations: one per kind, at the
// first call, with how many replays it covers.
func markers(j Judged, exp []casefile.ExpectedCall, obs []results.Call) []Finding {
	var out []Finding
	// A reply marked fresh is honest where it carries another value than
	// the replay would (a new effect, which the effect count judges).
	kinds := []struct {
		detail string
		match  func(o results.Call, e casefile.ExpectedCall) bool
	}{
		{"the target marks no replay", func(results.Call, casefile.ExpectedCall) bool { return !j.Marker }},
		{"a replay carried no marker", func(o results.Call, _ casefile.ExpectedCall) bool { return j.Marker && o.Replayed == nil }},
		{"a replay was marked as a fresh result", func(o results.Call, e casefile.ExpectedCall) bool {
			return j.Marker && o.Replayed != nil && !*o.Replayed && e.Body != nil && strOr(o.Body) == *e.Body
		}},
	}
	for _, k := range kinds {
		first, n := -1, 0
		for i := range obs {
			if e := exp[i]; e.Replayed == nil || e.Replayed.Absent || !e.Replayed.Value || !answered(obs[i], 200) || !k.match(obs[i], e) {
				continue
			}
			if first < 0 {
				first = i
			}
			n++
		}
		if n > 0 {
			out = append(out, Finding{Rule: ReplayMarker, Call: &first, Detail: fmt.Sprintf("%s (%d of the replays a sound implementation marks)", k.detail, n)})
		}
	}
	return out
}

// lastCalls returns, for every key, the index of its last call outside a
// concurrent group, in call order.
func lastCalls(plan []casefile.PlannedCall) []int {
	last := map[string]int{}
	for i, p := range plan {
		if p.Key != nil && p.Group < 0 {
			last[*p.Key] = i
		}
	}
	out := make([]int, 0, len(last))
	for _, i := range last {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// earlierSame reports whether an earlier call with call i's key got the
// same status and body.
func earlierSame(plan []casefile.PlannedCall, obs []results.Call, i int) bool {
	for j := range i {
		if plan[j].Key != nil && *plan[j].Key == *plan[i].Key && obs[j].Outcome == protocol.OutcomeReply &&
			*obs[j].Status == *obs[i].Status && strOr(obs[j].Body) == strOr(obs[i].Body) {
			return true
		}
	}
	return false
}

func answered(o results.Call, s int) bool {
	return o.Outcome == protocol.OutcomeReply && o.Status != nil && *o.Status == s
}

func status(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func strOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// describeKey names a key for a finding: quoted, cut at 40 bytes.
func describeKey(k *string) string {
	if k == nil {
		return "(none)"
	}
	if len(*k) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", (*k)[:40], len(*k))
	}
	return fmt.Sprintf("%q", *k)
}

// quoteBody quotes a reply body for a finding, cut at 60 bytes.
func quoteBody(b *string) string {
	if b == nil {
		return "(no body)"
	}
	s := *b
	if len(s) > 60 {
		return fmt.Sprintf("%q...", s[:60])
	}
	return fmt.Sprintf("%q", s)
}

// Mirror compares a run of the lab's own server run as a target with the
// native run of the store it mirrors (target.json's mirrors): the effects,
// the exit codes and every call must be equal, Retry-After aside (the
// native path does not record it). It returns one line per difference.
func Mirror(native, got results.Run) []string {
	var out []string
	if native.Counter != got.Counter {
		out = append(out, fmt.Sprintf("effects: %d natively, %d as a target", native.Counter, got.Counter))
	}
	if !slices.Equal(native.ExitCodes, got.ExitCodes) {
		out = append(out, fmt.Sprintf("exit codes: %v natively, %v as a target", native.ExitCodes, got.ExitCodes))
	}
	if len(native.Calls) != len(got.Calls) {
		return append(out, fmt.Sprintf("calls: %d natively, %d as a target", len(native.Calls), len(got.Calls)))
	}
	for i := range native.Calls {
		a, b := native.Calls[i], got.Calls[i]
		b.RetryAfter = a.RetryAfter
		if results.Compare(a, b) != 0 || a.Step != b.Step || a.Replica != b.Replica || strOr(a.Key) != strOr(b.Key) || strOr(a.Fault) != strOr(b.Fault) {
			out = append(out, fmt.Sprintf("call %d: %s natively, %s as a target", i, describe(a), describe(b)))
		}
	}
	return out
}

// describe is one call's observation in a line.
func describe(c results.Call) string {
	if c.Outcome != protocol.OutcomeReply {
		return string(c.Outcome)
	}
	r := "null"
	if c.Replayed != nil {
		r = fmt.Sprint(*c.Replayed)
	}
	return fmt.Sprintf("%d %s replayed=%s", status(c.Status), quoteBody(c.Body), r)
}

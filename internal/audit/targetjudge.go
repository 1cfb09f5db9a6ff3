package audit

import (
	"fmt"
	"slices"
	"strconv"
)

// This file judges a run of a case on a target (docs/targets.md,
// "Verdicts"): safety (effects applied against the sound implementation's,
// another body replayed, a failure stored, a key left in progress, a retry
// unanswered, a wrong value) apart from conformance to the IETF
// Idempotency-Key draft (422, 409 with Retry-After, 400, 413, 429, the
// replay marker), by property, from the observations and the case file.

// The verdict rules, safety first.
const (
	ruleDuplicateEffect   = "duplicate_effect"
	ruleLostEffect        = "lost_effect"
	ruleOtherBodyReplayed = "other_body_replayed"
	ruleStoredFailure     = "stored_failure"
	ruleStuckKey          = "stuck_key"
	ruleRetryFailed       = "retry_failed"
	ruleWrongValue        = "wrong_value"

	ruleConflictStatus = "conflict_status"
	ruleInFlightStatus = "in_flight_status"
	ruleRetryAfter     = "retry_after"
	ruleMalformedKey   = "malformed_key"
	ruleBodyLimit      = "body_limit"
	ruleCapacityStatus = "capacity_status"
	ruleReplayMarker   = "replay_marker"
)

// The safety verdicts.
const (
	safetyPass       = "pass"
	safetyLimitation = "limitation"
	safetyViolation  = "violation"
)

// notDurableLimitation explains a finding when a target forgets its keys.
const notDurableLimitation = "the target claims no durable store: a restart or a crash forgets its keys"

// obsCall is one observed call of a run on a target, from targets.json.
type obsCall struct {
	step, replica int64
	key, fault    *string
	outcome       string
	status        int64 // 0 without a reply
	body          *string
	replayed      *bool
	retryAfter    bool // a Retry-After header came with the reply
}

// readObsCall reads a schema-valid call of targets.json.
func readObsCall(v any) obsCall {
	m, _ := v.(map[string]any)
	o := obsCall{step: number(m["step"]), replica: number(m["replica"]), status: number(m["status"])}
	o.outcome, _ = str(m, "outcome")
	o.key, o.fault, o.body = optString(m["key"]), optString(m["fault"]), optString(m["body"])
	if b, ok := m["replayed"].(bool); ok {
		o.replayed = &b
	}
	_, o.retryAfter = m["retry_after"].(string)
	return o
}

func optString(v any) *string {
	if s, ok := v.(string); ok {
		return &s
	}
	return nil
}

// deref is *p, "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (o obsCall) answered(status int64) bool { return o.outcome == "reply" && o.status == status }

// judgeTarget judges a run of c on t that applied counter effects; an
// error means the calls do not line up with c's steps.
func judgeTarget(c *Case, t *targetSpec, counter int64, calls []obsCall) (targetRunVerdict, error) {
	sound := soundCalls(c)
	if sound == nil {
		return targetRunVerdict{}, fmt.Errorf("%s has no target section with an expectation of its sound store", c.File)
	}
	if len(calls) != len(c.Plan) || len(sound) != len(c.Plan) {
		return targetRunVerdict{}, fmt.Errorf("%d calls observed, %s's steps send %d", len(calls), c.File, len(c.Plan))
	}
	j := &targetJudge{c: c, sound: sound, calls: calls,
		v: targetRunVerdict{Case: c.Name, Effects: counter, SoundEffects: number(c.Expect[c.Sound].Counter)}}
	if c.LosesProcess && !t.durable {
		j.limitation = notDurableLimitation
	}
	adjusted := j.refusalsTaken()
	if v := &j.v; v.Effects != v.SoundEffects {
		rule := ruleDuplicateEffect
		if v.Effects < v.SoundEffects {
			rule = ruleLostEffect
		}
		j.find(rule, -1, fmt.Sprintf("%d effects applied; a sound implementation applies %d", v.Effects, v.SoundEffects))
	}
	j.statuses()
	j.v.Deviations = append(j.v.Deviations, markerDeviations(t, sound, calls)...)
	j.fates(j.v.Effects == j.v.SoundEffects && !adjusted)
	j.v.Safety = safetyPass
	for _, f := range j.v.Findings {
		if f.Limitation == "" {
			j.v.Safety = safetyViolation
			break
		}
		j.v.Safety = safetyLimitation
	}
	return j.v, nil
}

// targetJudge is judgeTarget's state.
type targetJudge struct {
	c          *Case
	sound      []soundCall
	calls      []obsCall
	limitation string // every finding's, when the case loses a process the target does not keep
	v          targetRunVerdict
}

func (j *targetJudge) deviate(rule string, call int, detail string) {
	j.v.Deviations = append(j.v.Deviations, finding{Rule: rule, Call: callRef(call), Detail: detail})
}

func (j *targetJudge) find(rule string, call int, detail string) {
	j.v.Findings = append(j.v.Findings, finding{Rule: rule, Call: callRef(call), Detail: detail, Limitation: j.limitation})
}

// refusalsTaken finds the requests a sound implementation refuses that
// the target took with a 200: each a deviation, and one more effect a
// sound count allows. It reports whether there was one (the values after
// it are shifted, so they are not judged).
func (j *targetJudge) refusalsTaken() bool {
	adjusted := false
	for i, o := range j.calls {
		if !o.answered(200) {
			continue
		}
		var detail, rule string
		switch j.sound[i].status {
		case 400:
			rule, detail = ruleMalformedKey, fmt.Sprintf("key %s was accepted; the draft asks for 400", keyText(j.c.Plan[i].Key))
		case 413:
			rule, detail = ruleBodyLimit, fmt.Sprintf("a %d-byte body was accepted; a sound implementation refuses it with 413", j.c.Plan[i].BodyLen)
		case 429:
			rule, detail = ruleCapacityStatus, "a new key beyond the claimed capacity was accepted; 429 was due"
		default:
			continue
		}
		j.v.SoundEffects++
		adjusted = true
		j.deviate(rule, i, detail)
	}
	return adjusted
}

// statuses judges each call's status where a sound implementation answers
// 422 or a duplicate in flight, and every 409's Retry-After.
func (j *targetJudge) statuses() {
	for i, o := range j.calls {
		e, key := j.sound[i], keyText(j.c.Plan[i].Key)
		switch {
		case e.status == 422 && o.outcome == "reply" && o.status >= 200 && o.status < 300:
			j.find(ruleOtherBodyReplayed, i, fmt.Sprintf("another body with key %s was answered %d %s: it got the first request's result (a sound implementation answers 422)", key, o.status, bodyText(o.body)))
		case e.status == 422 && o.outcome == "reply" && o.status != 422:
			j.deviate(ruleConflictStatus, i, fmt.Sprintf("another body with key %s was answered %d; the draft asks for 422", key, o.status))
		case e.status == 422:
		case j.c.Plan[i].InFlight && e.status == 200 && o.outcome == "reply" && o.status != 200 && o.status != 409:
			j.deviate(ruleInFlightStatus, i, fmt.Sprintf("a duplicate in flight was answered %d; the draft asks for 409 (the lab's server waits and replays)", o.status))
		}
		if o.answered(409) && !o.retryAfter {
			j.deviate(ruleRetryAfter, i, "409 without Retry-After")
		}
	}
}

// fates judges each intent a sound implementation answers 200 (the last
// call of its key outside a concurrent group) by the target's answer;
// counted says whether the values can be judged.
func (j *targetJudge) fates(counted bool) {
	for _, i := range lastOfKeys(j.c.Plan) {
		o, e := j.calls[i], j.sound[i]
		if e.outcome != "reply" || e.status != 200 {
			continue
		}
		key := keyText(j.c.Plan[i].Key)
		switch {
		case o.outcome != "reply":
			j.find(ruleRetryFailed, i, fmt.Sprintf("the last call with key %s got no reply (%s); a sound implementation answers 200", key, o.outcome))
		case o.status == 409:
			j.find(ruleStuckKey, i, fmt.Sprintf("the last call with key %s got 409: the key was left in progress (a sound implementation answers 200)", key))
		case o.status >= 500 && sameAsEarlier(j.c.Plan, j.calls, i):
			j.find(ruleStoredFailure, i, fmt.Sprintf("the last call with key %s got the earlier %d %s back: a failure was stored as the key's result", key, o.status, bodyText(o.body)))
		case o.status != 200:
			j.find(ruleRetryFailed, i, fmt.Sprintf("the last call with key %s got %d; a sound implementation answers 200", key, o.status))
		case counted && e.body != nil && (o.body == nil || *o.body != *e.body):
			j.find(ruleWrongValue, i, fmt.Sprintf("the last call with key %s answered %s; a sound implementation answers %s", key, bodyText(o.body), strconv.Quote(*e.body)))
		}
	}
}

// callRef is a finding's call: nil (the whole run) for -1.
func callRef(i int) *int {
	if i < 0 {
		return nil
	}
	return &i
}

// markerDeviations are the replay-marker deviations over the replays a
// sound implementation marks: one per kind (no marker declared, a replay
// unmarked, one marked fresh), at its first call, with its count.
func markerDeviations(t *targetSpec, sound []soundCall, calls []obsCall) []finding {
	kinds := []struct {
		what string
		is   func(o obsCall, e soundCall) bool
	}{
		{"the target marks no replay", func(obsCall, soundCall) bool { return t.replay == nil }},
		{"a replay carried no marker", func(o obsCall, _ soundCall) bool { return t.replay != nil && o.replayed == nil }},
		{"a replay was marked as a fresh result", func(o obsCall, e soundCall) bool {
			return t.replay != nil && o.replayed != nil && !*o.replayed && e.body != nil && deref(o.body) == *e.body
		}},
	}
	var out []finding
	for _, k := range kinds {
		first, n := -1, 0
		for i, o := range calls {
			if sound[i].replayed != replayedTrue || !o.answered(200) || !k.is(o, sound[i]) {
				continue
			}
			if first < 0 {
				first = i
			}
			n++
		}
		if n > 0 {
			out = append(out, finding{Rule: ruleReplayMarker, Call: callRef(first),
				Detail: fmt.Sprintf("%s (%d of the replays a sound implementation marks)", k.what, n)})
		}
	}
	return out
}

// lastOfKeys returns each key's last call outside a concurrent step, in order.
func lastOfKeys(plan []PlannedCall) []int {
	last := map[string]int{}
	for i, p := range plan {
		if p.Key != nil && !p.InFlight {
			last[*p.Key] = i
		}
	}
	var out []int
	for _, i := range last {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// sameAsEarlier reports whether an earlier call with i's key got its reply.
func sameAsEarlier(plan []PlannedCall, calls []obsCall, i int) bool {
	for j := range i {
		if plan[j].Key != nil && *plan[j].Key == *plan[i].Key && calls[j].outcome == "reply" &&
			calls[j].status == calls[i].status && deref(calls[j].body) == deref(calls[i].body) {
			return true
		}
	}
	return false
}

// keyText quotes a key in a finding, its first 40 bytes and length when longer.
func keyText(k *string) string {
	switch {
	case k == nil:
		return "(none)"
	case len(*k) > 40:
		return fmt.Sprintf("%s... (%d bytes)", strconv.Quote((*k)[:40]), len(*k))
	}
	return strconv.Quote(*k)
}

// bodyText quotes a reply body in a finding: Go-quoted, cut at 60 bytes.
func bodyText(b *string) string {
	switch {
	case b == nil:
		return "(no body)"
	case len(*b) > 60:
		return strconv.Quote((*b)[:60]) + "..."
	}
	return strconv.Quote(*b)
}

// mirrorDiffs compares a run of the lab's own server as a target with the
// native run of the store it mirrors: the effects, the exit codes and
// every call (not Retry-After, which the native run does not record).
func mirrorDiffs(native map[string]any, counter int64, codes []any, calls []obsCall) []string {
	var out []string
	if n := number(native["counter"]); n != counter {
		out = append(out, fmt.Sprintf("effects: %d natively, %d as a target", n, counter))
	}
	nativeCodes, _ := native["exit_codes"].([]any)
	if render(nativeCodes) != render(codes) && len(nativeCodes)+len(codes) > 0 {
		out = append(out, fmt.Sprintf("exit codes: %s natively, %s as a target", goList(nativeCodes), goList(codes)))
	}
	nativeCalls, _ := native["calls"].([]any)
	if len(nativeCalls) != len(calls) {
		return append(out, fmt.Sprintf("calls: %d natively, %d as a target", len(nativeCalls), len(calls)))
	}
	for i, nv := range nativeCalls {
		n, g := readObsCall(nv), calls[i]
		same := n.outcome == g.outcome && n.status == g.status && deref(n.body) == deref(g.body) &&
			(n.replayed == nil) == (g.replayed == nil) && (n.replayed == nil || *n.replayed == *g.replayed) &&
			n.step == g.step && n.replica == g.replica && deref(n.key) == deref(g.key) && deref(n.fault) == deref(g.fault)
		if !same {
			out = append(out, fmt.Sprintf("call %d: %s natively, %s as a target", i, callText(n), callText(g)))
		}
	}
	return out
}

// callText is one observed call in a mirror line.
func callText(o obsCall) string {
	if o.outcome != "reply" {
		return o.outcome
	}
	r := "null"
	if o.replayed != nil {
		r = strconv.FormatBool(*o.replayed)
	}
	return fmt.Sprintf("%d %s replayed=%s", o.status, bodyText(o.body), r)
}

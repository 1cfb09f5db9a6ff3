package audit

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// This file judges a run of a case on a target by property, safety apart
// from conformance (docs/targets.md, "Verdicts").

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
	ruleReplayStatus   = "replay_status"
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
	o.key, o.fault, o.body = opt[string](m["key"]), opt[string](m["fault"]), opt[string](m["body"])
	o.replayed = opt[bool](m["replayed"])
	_, o.retryAfter = m["retry_after"].(string)
	return o
}

// opt is v as a *T, nil when v is not a T (a JSON null, or absent).
func opt[T any](v any) *T {
	if x, ok := v.(T); ok {
		return &x
	}
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (o obsCall) answered(status int64) bool { return o.outcome == "reply" && o.status == status }

// succeeded reports whether o got a reply with a 2xx status: any 2xx is a success.
func (o obsCall) succeeded() bool { return o.outcome == "reply" && success(o.status) }

// marked reports whether o carried the target's replay marker saying "replayed".
func (o obsCall) marked() bool { return o.replayed != nil && *o.replayed }

func success(status int64) bool { return status >= 200 && status < 300 }

// judgeTarget judges a run of c on t that applied counter effects (on a
// case with a ledger, the sink plays it: the sound run's effects are the
// ledger's); unforwarded says the sink read no key of the target's where
// the case lets one reach it. An error means the calls do not line up with
// c's steps.
func judgeTarget(c *Case, t *targetSpec, counter int64, calls []obsCall, unforwarded bool) (targetRunVerdict, error) {
	sound := soundCalls(c)
	if sound == nil {
		return targetRunVerdict{}, fmt.Errorf("%s has no target section with an expectation of its sound store", c.File)
	}
	if len(calls) != len(c.Plan) || len(sound) != len(c.Plan) {
		return targetRunVerdict{}, fmt.Errorf("%d calls observed, %s's steps send %d", len(calls), c.File, len(c.Plan))
	}
	soundEffects := c.Expect[c.Sound].Counter
	if c.Ledger {
		soundEffects = c.Expect[c.Sound].Ledger
	}
	j := &targetJudge{c: c, sound: sound, calls: calls,
		v: targetRunVerdict{Case: c.Name, Effects: counter, SoundEffects: number(soundEffects)}}
	if c.LosesProcess && !t.durable {
		j.limitation = notDurableLimitation
	}
	adjusted := j.refusalsTaken()
	if v := &j.v; v.Effects != v.SoundEffects {
		rule := ruleDuplicateEffect
		if v.Effects < v.SoundEffects {
			rule = ruleLostEffect
		}
		detail := fmt.Sprintf("%d effects applied; a sound implementation applies %d", v.Effects, v.SoundEffects)
		if rule == ruleDuplicateEffect && unforwarded {
			detail += fmt.Sprintf("; the target did not forward its key to the sink (no %s in its journal)", t.forwardHeader)
		}
		j.find(rule, -1, detail)
	}
	j.replays = findReplays(c, sound, calls)
	j.statuses()
	j.replayStatuses()
	j.v.Deviations = append(j.v.Deviations, markerDeviations(t, calls, j.replays)...)
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
	replays    []replay
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
// the target took with a 2xx: each a deviation, and one more effect a
// sound count allows. It reports whether there was one (the values after
// it are shifted, so they are not judged).
func (j *targetJudge) refusalsTaken() bool {
	adjusted := false
	for i, o := range j.calls {
		if !o.succeeded() {
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
// 422 or a duplicate in flight, and the Retry-After of every 409 sent
// while an owner of its key was running.
func (j *targetJudge) statuses() {
	for i, o := range j.calls {
		e, key := j.sound[i], keyText(j.c.Plan[i].Key)
		switch {
		case e.status == 422 && o.succeeded():
			j.find(ruleOtherBodyReplayed, i, fmt.Sprintf("another body with key %s was answered %d %s: it got the first request's result (a sound implementation answers 422)", key, o.status, bodyText(o.body)))
		case e.status == 422 && o.outcome == "reply" && o.status != 422:
			j.deviate(ruleConflictStatus, i, fmt.Sprintf("another body with key %s was answered %d; the draft asks for 422", key, o.status))
		case e.status == 422:
			continue // a 409 for another body is conflict_status's business, not Retry-After's
		case j.c.Plan[i].InFlight && success(e.status) && o.outcome == "reply" && !o.succeeded() && o.status != 409:
			j.deviate(ruleInFlightStatus, i, fmt.Sprintf("a duplicate in flight was answered %d; the draft asks for 409 (the lab's server waits and replays)", o.status))
		}
		if o.answered(409) && !o.retryAfter && j.ownerRunning(i) {
			j.deviate(ruleRetryAfter, i, "409 without Retry-After")
		}
	}
}

// ownerRunning reports whether call i was sent while an earlier request
// with its key was still running at the target, so that a 409 says "in
// flight, come back later": a duplicate of a concurrent step; a call of a
// parallel step after another with its key; the call that follows a call
// with its key the client gave up on (timeout), with no step (a sleep, a
// stop, a start) between them. A 409 after the owner ended (a restart, a
// crash, a failure, a sleep) is not in flight, even where a sound
// implementation still holds its claim (a lease): the key is left in
// progress, judged by fates as stuck_key where it is the key's last answer.
func (j *targetJudge) ownerRunning(i int) bool {
	p := j.c.Plan[i]
	if p.InFlight {
		return true
	}
	for k, q := range j.c.Plan[:i] {
		if !sameKey(p, q) {
			continue
		}
		if (p.Group >= 0 && q.Group == p.Group) || (j.calls[k].outcome == "timeout" && p.Step-q.Step <= 1) {
			return true
		}
	}
	return false
}

func sameKey(p, q PlannedCall) bool { return p.Key != nil && q.Key != nil && *p.Key == *q.Key }

// replayStatuses judges each replay whose original reply was observed: a
// replay repeats the status of the reply it replays (an in-flight
// duplicate that waits, the owner's).
func (j *targetJudge) replayStatuses() {
	for _, r := range j.replays {
		if r.of < 0 {
			continue
		}
		if o, orig := j.calls[r.call], j.calls[r.of]; o.status != orig.status {
			j.deviate(ruleReplayStatus, r.call, fmt.Sprintf("a replay of call %d's %d %s was answered %d; a replay repeats the status of the reply it replays", r.of, orig.status, bodyText(orig.body), o.status))
		}
	}
}

// fates judges each intent a sound implementation answers with a 2xx
// (the last call of its key outside a concurrent group) by the target's
// answer; counted says whether the values can be judged.
func (j *targetJudge) fates(counted bool) {
	for _, i := range lastOfKeys(j.c.Plan) {
		o, e := j.calls[i], j.sound[i]
		if e.outcome != "reply" || !success(e.status) {
			continue
		}
		key := keyText(j.c.Plan[i].Key)
		switch stored := j.storedFailure(i); {
		case o.outcome != "reply":
			j.find(ruleRetryFailed, i, fmt.Sprintf("the last call with key %s got no reply (%s); a sound implementation answers %d", key, o.outcome, e.status))
		case o.status == 409:
			j.find(ruleStuckKey, i, fmt.Sprintf("the last call with key %s got 409: the key was left in progress (a sound implementation answers %d)", key, e.status))
		case stored != "":
			j.find(ruleStoredFailure, i, fmt.Sprintf("the last call with key %s got %d %s (%s): a failure was stored as the key's result", key, o.status, bodyText(o.body), stored))
		case !o.succeeded():
			j.find(ruleRetryFailed, i, fmt.Sprintf("the last call with key %s got %d; a sound implementation answers %d", key, o.status, e.status))
		case counted && e.body != nil && (o.body == nil || *o.body != *e.body):
			j.find(ruleWrongValue, i, fmt.Sprintf("the last call with key %s answered %s; a sound implementation answers %s", key, bodyText(o.body), strconv.Quote(*e.body)))
		}
	}
}

// storedFailure says why call i's 5xx is a failure the target stored as
// its key's result and replayed ("" when it is not one): the target marks
// it as a replay, or it repeats the status of an earlier call with its key
// that the lab failed (a fault placed on it) though the lab placed no
// fault on call i. Without a fault the sink does not fail call i, so a
// target that ran it again would have got the effect's value; a retry
// given a fault of its own may have failed anew, and is not called stored.
// Bodies are not compared: a library may rebuild its error body (a time in
// it) when it replays a stored error.
func (j *targetJudge) storedFailure(i int) string {
	o, p := j.calls[i], j.c.Plan[i]
	if o.outcome != "reply" || o.status < 500 {
		return ""
	}
	var why []string
	if o.marked() {
		why = append(why, "marked as a replay")
	}
	for k, q := range j.c.Plan[:i] {
		if p.Fault == nil && q.Fault != nil && sameKey(p, q) && j.calls[k].answered(o.status) {
			why = append(why, fmt.Sprintf("failed call %d's status again, with no fault of its own", k))
			break
		}
	}
	return strings.Join(why, "; ")
}

// callRef is a finding's call: nil (the whole run) for -1.
func callRef(i int) *int {
	if i < 0 {
		return nil
	}
	return &i
}

// markerDeviations are the replay-marker deviations over the replays the
// target answered: one per kind (no marker declared, a replay unmarked,
// one marked fresh), at its first call, with its count. A fresh reply is
// not judged: a target may mark its replays only.
func markerDeviations(t *targetSpec, calls []obsCall, replays []replay) []finding {
	kinds := []struct {
		what string
		is   func(o obsCall) bool
	}{
		{"the target marks no replay", func(obsCall) bool { return t.replay == nil }},
		{"a replay carried no marker", func(o obsCall) bool { return t.replay != nil && o.replayed == nil }},
		{"a replay was marked as a fresh result", func(o obsCall) bool { return t.replay != nil && o.replayed != nil && !*o.replayed }},
	}
	var out []finding
	for _, k := range kinds {
		var hits []int
		for _, r := range replays {
			if k.is(calls[r.call]) {
				hits = append(hits, r.call)
			}
		}
		if len(hits) > 0 {
			out = append(out, finding{Rule: ruleReplayMarker, Call: callRef(hits[0]),
				Detail: fmt.Sprintf("%s (%d of %d replays)", k.what, len(hits), len(replays))})
		}
	}
	return out
}

// A replay is a reply that applied no new effect and repeats an earlier
// reply's result: of is the call whose reply it repeats, -1 when the
// client never got that reply (it was dropped, or its request timed out).
type replay struct{ call, of int }

// findReplays finds the run's replays, in call order. A keyed call
// answered 2xx repeats an earlier result when an earlier call with the
// same key and request body got a 2xx with the same body; or, where its
// original reply was never observed, when a sound implementation replays
// there and the body is the one it replays (a new effect would have
// carried a new value). In a concurrent group, one of the replies
// sharing a new result is its original (the first not marked as a replay)
// and the others replay it. Where a sound implementation runs a call
// anew (its reply marked fresh: after a crashed owner, an expired key) a
// repeated value is the downstream's replay of a forwarded key, not the
// target's: not a replay.
func findReplays(c *Case, sound []soundCall, calls []obsCall) []replay {
	type result struct{ key, request, body string }
	resultOf := func(i int) (result, bool) {
		if c.Plan[i].Key == nil || !calls[i].succeeded() {
			return result{}, false
		}
		return result{*c.Plan[i].Key, string(c.Plan[i].Body()), deref(calls[i].body)}, true
	}
	orig := map[result]int{} // each result's original reply
	var out []replay
	for i := 0; i < len(calls); i++ {
		if c.Plan[i].InFlight {
			end := i + 1
			for end < len(calls) && c.Plan[end].InFlight && c.Plan[end].Group == c.Plan[i].Group {
				end++
			}
			group := map[result]int{} // the originals of the group's new results
			for m := i; m < end; m++ {
				r, ok := resultOf(m)
				if _, seen := orig[r]; !ok || seen {
					continue
				}
				if g, ok := group[r]; !ok || (calls[g].marked() && !calls[m].marked()) {
					group[r] = m
				}
			}
			for m := i; m < end; m++ {
				r, ok := resultOf(m)
				if k, seen := orig[r]; ok && seen {
					out = append(out, replay{m, k})
				} else if g := group[r]; ok && g != m {
					out = append(out, replay{m, g})
				}
			}
			maps.Copy(orig, group)
			i = end - 1
			continue
		}
		r, ok := resultOf(i)
		k, seen := orig[r]
		switch e := sound[i]; {
		case !ok:
		case e.replayed == replayedFalse: // run anew: fresh, even with a value seen before
			if !seen {
				orig[r] = i
			}
		case seen:
			out = append(out, replay{i, k})
		case e.replayed == replayedTrue && e.body != nil && deref(calls[i].body) == *e.body:
			out = append(out, replay{i, -1})
			orig[r] = i
		default:
			orig[r] = i
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
	return slices.Sorted(maps.Values(last))
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

package audit

import (
	"fmt"
	"strconv"
	"strings"
)

// This file holds the rule that a fault the lab placed and that did not
// happen is never judged as the target's doing. A fault that acts at the
// effect sink is armed for the client's body, and fires only when the
// target's call to the sink carries that body: a target that wraps the
// payload, or makes no call, leaves it unfired, and the case then tested
// nothing of what it says (crash_after_effect without the crash). Such a
// trial is not judged; the case's verdict is its other trials', and a case
// whose fault fired in none is "not run", with why.

// maxSinkCalls is how many of the sink's per-call records a run keeps
// (caserun.MaxSinkCalls): past it, their count is not checked.
const maxSinkCalls = 1000

// armsAtSink reports whether the X-Lab-Fault value v arms a fault at the
// effect sink of target t: one of its parts acts there, t not mapping it
// to a header of its own (target.Place's rule, read again).
func armsAtSink(v string, t *targetSpec) bool {
	if v == "" || t.native[allFaults] || !t.sink {
		return false
	}
	for _, part := range strings.Split(v, ",") {
		name, _, _ := strings.Cut(part, "=")
		if at, known := targetFaults[name]; known && at == atSink && !t.native[name] {
			return true
		}
	}
	return false
}

// unfiredAtSink reads a trial's exchanges and the sink's records of its
// calls: each fault armed at the sink, and whether a call of the target
// took it. It checks that the proxy armed exactly what the audit's reading
// of target.json places at the sink, and that the sink took as many armed
// faults as the exchanges say fired; it returns why the trial cannot be
// judged: the faults that fired on none of their exchanges ("" when each
// did, and for evidence from before the sink's records were kept).
func (a *auditor) unfiredAtSink(spec *targetSpec, det map[string]any, fail callFail) string {
	calls, recorded := det["sink_calls"].([]any)
	if !recorded {
		return ""
	}
	exchanges, _ := det["exchanges"].([]any)
	fired := map[string]bool{}
	var order []string
	nFired := 0
	for i, x := range exchanges {
		m, _ := x.(map[string]any)
		fault, _ := str(m, "fault")
		armed, took := m["sink_armed"] == true, m["sink_fired"] == true
		field := fmt.Sprintf("detail.exchanges[%d]", i)
		a.check()
		if want := armsAtSink(fault, spec); armed != want {
			fail(nil, field+".sink_armed", fmt.Sprintf("%v (fault %s, by the audit's reading of target.json)", want, strconv.Quote(fault)), strconv.FormatBool(armed))
		}
		a.check()
		if took && !armed {
			fail(nil, field+".sink_fired", "false (nothing was armed at the sink for it)", "true")
		}
		if !armed {
			continue
		}
		if _, seen := fired[fault]; !seen {
			order = append(order, fault)
		}
		fired[fault] = fired[fault] || took
		if took {
			nFired++
		}
	}
	nArmed := 0
	for _, c := range calls {
		if m, _ := c.(map[string]any); m["armed"] == true {
			nArmed++
		}
	}
	a.check()
	if nArmed != nFired && len(calls) < maxSinkCalls {
		fail(nil, "detail.sink_calls", fmt.Sprintf("%d calls that took an armed fault (as many as the exchanges whose fault fired)", nFired), strconv.Itoa(nArmed))
	}
	var unfired []string
	for _, f := range order {
		if !fired[f] {
			unfired = append(unfired, strconv.Quote(f))
		}
	}
	if len(unfired) == 0 {
		return ""
	}
	return fmt.Sprintf("fault %s, armed at the effect sink, did not fire: no call of the target to the sink carried the client's body (the sink saw %s)",
		strings.Join(unfired, ", "), plural(len(calls), "call"))
}

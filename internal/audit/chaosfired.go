package audit

import (
	"fmt"
	"slices"
	"strings"
)

// This file holds whether the faults a chaos run on a target placed at
// the effect sink fired: history_version 3 records, per attempt for which
// the fault proxy armed a fault at the sink, whether a call of the target
// took it (sink_fired; null where nothing was armed). A fault that did
// not fire did not happen: the verdict counts those that did beside those
// armed (sink_faults), and a kind armed and never fired is said.

// HistoryVersionMax is the newest chaos history the audit reads; 2 lacks
// sink_fired.
const HistoryVersionMax = 3

// attemptFieldsV3 are an attempt line's members from history_version 3.
var attemptFieldsV3 = append(slices.Clone(chaosLineFields["attempt"]), "sink_fired")

// maxSinkFaultValues bounds the distinct fault values sinkFired keeps: the
// schedule draws a few hundred (delays and stalls of so many ms).
const maxSinkFaultValues = 10000

// readSinkFired reads an attempt's sink_fired, counted by its fault.
func (h *chaosHistory) readSinkFired(l *lineReader, fault []byte) {
	fired := l.boolOrNull("sink_fired")
	if fired < 0 {
		return
	}
	c, ok := h.sinkFired[string(fault)]
	if !ok {
		if len(h.sinkFired) >= maxSinkFaultValues {
			l.failf("sink_fired: more than %d distinct faults armed at the sink", maxSinkFaultValues)
			return
		}
		c = &[2]int64{}
		h.sinkFired[string(fault)] = c
	}
	c[0]++
	c[1] += int64(fired)
}

// A SinkFault is one fault kind a chaos run on a target placed at the
// effect sink: the attempts it was armed for, and those it fired in.
type SinkFault struct {
	Armed int64 `json:"armed"`
	Fired int64 `json:"fired"`
}

// checkSinkFired checks the history's sink_fired against where the run's
// store or target places each fault, and counts each kind placed at the
// sink. spec is the target's (nil on a store, or a target outside the
// checkout, whose placements are the runner's word). Counts go into the
// verdict (chaosVerdictOf); a kind armed and never fired is noted.
func (a *auditor) checkSinkFired(sub chaosSubject, hist *chaosHistory, spec *targetSpec) {
	name := sub.base() + ".jsonl"
	hist.sinkFaults = map[string]SinkFault{}
	for _, fault := range sortedKeys(hist.sinkFired) {
		c := hist.sinkFired[fault]
		a.check()
		if sub.store != "" {
			a.chaosFail(sub, "history", "%s: fault %q: sink_fired recorded on %s, but the lab's own server takes its faults itself: no fault is armed at a sink", name, fault, plural(int(c[0]), "attempt"))
			continue
		}
		kinds := sinkKinds(fault, spec)
		if len(kinds) == 0 && spec != nil {
			a.chaosFail(sub, "history", "%s: fault %q: sink_fired recorded on %s, but target %s places no part of it at the effect sink", name, fault, plural(int(c[0]), "attempt"), sub.target)
			continue
		}
		for _, k := range kinds {
			f := hist.sinkFaults[k]
			f.Armed, f.Fired = f.Armed+c[0], f.Fired+c[1]
			hist.sinkFaults[k] = f
		}
	}
	for _, k := range sortedKeys(hist.sinkFaults) {
		if f := hist.sinkFaults[k]; f.Fired == 0 {
			a.note(fmt.Sprintf("chaos: target %s: %s, armed at the effect sink for %s, fired in none (no call of the target to the sink carried the client's body while it was armed): the run did not test it",
				sub.target, k, plural(int(f.Armed), "attempt")))
		}
	}
}

// sinkKinds are the kinds of the X-Lab-Fault value v that target spec
// places at the effect sink (every kind the sink can take, when spec is
// nil: a target outside the checkout, the runner's word).
func sinkKinds(v string, spec *targetSpec) []string {
	var out []string
	for part := range strings.SplitSeq(v, ",") {
		name, _, _ := strings.Cut(part, "=")
		at, known := targetFaults[name]
		if !known || at != atSink || spec != nil && (spec.native[name] || spec.native[allFaults] || !spec.sink) {
			continue
		}
		out = append(out, name)
	}
	return out
}

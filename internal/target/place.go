package target

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/sink"
)

// This file places each lab fault on a target (docs/targets.md): as its own
// header where it maps the fault, else on the fault proxy or the sink.

// AllFaults, as a faults.native name, maps every lab fault to one header;
// FaultValue in its value passes the lab's fault value through.
const (
	AllFaults  = "*"
	FaultValue = "{fault}"
)

// A Placement is where one X-Lab-Fault value acts on a target.
type Placement struct {
	Header      http.Header   // the target's own fault header(s); nil for none
	Sink        *sink.Action  // what the sink does with the intent's effect call; nil: the normal effect
	DropReply   bool          // the proxy reads the target's reply and drops it
	HoldAndKill bool          // the proxy holds the target's reply, kills the target, drops the reply
	GiveUp      time.Duration // the proxy closes the client's connection unanswered after this long, the target's exchange going on; 0: never
}

// ErrNotPlaceable means a fault cannot act on this target; the error says why.
var ErrNotPlaceable = errors.New("fault cannot be placed on this target")

// placement says where one lab fault acts when the target does not map it:
// on the proxy or on the sink, changing the sink's action.
type placement struct {
	proxy func(*Placement, time.Duration)
	sink  func(*sink.Action, time.Duration)
}

var placements = map[string]placement{
	string(protocol.FaultDropReply):        {proxy: func(p *Placement, _ time.Duration) { p.DropReply = true }},
	string(protocol.FaultCrashAfterRecord): {proxy: func(p *Placement, _ time.Duration) { p.HoldAndKill = true }},
	FaultGiveUp:                            {proxy: func(p *Placement, d time.Duration) { p.GiveUp = max(d, time.Millisecond) }},
	string(protocol.FaultSlow): {sink: func(a *sink.Action, _ time.Duration) {
		a.Before += protocol.SlowDelay
	}},
	string(protocol.FaultDelay):             {sink: func(a *sink.Action, d time.Duration) { a.Before += d }},
	string(protocol.FaultStall):             {sink: func(a *sink.Action, d time.Duration) { a.After += d }},
	string(protocol.FaultCrashBeforeEffect): {sink: func(a *sink.Action, _ time.Duration) { a.Apply, a.End = false, sink.Kill }},
	string(protocol.FaultCrashAfterEffect):  {sink: func(a *sink.Action, _ time.Duration) { a.End = sink.Kill }},
	string(protocol.FaultFailEffect):        {sink: func(a *sink.Action, _ time.Duration) { a.Apply, a.End = false, sink.Fail }},
	string(protocol.FaultFailAfterEffect):   {sink: func(a *sink.Action, _ time.Duration) { a.End = sink.Fail }},
	// The downstream faults, where the sink plays the ledger: the claim
	// made, the process dies before its effect call reaches the sink; the
	// ledger applied, the process dies before its reply (the crash gap);
	// the ledger applied and its reply is lost, the process lives.
	string(protocol.FaultCrashAfterClaim):      {sink: func(a *sink.Action, _ time.Duration) { a.Apply, a.End = false, sink.Kill }},
	string(protocol.FaultCrashAfterDownstream): {sink: func(a *sink.Action, _ time.Duration) { a.End = sink.Kill }},
	string(protocol.FaultDropDownstreamReply):  {sink: func(a *sink.Action, _ time.Duration) { a.End = sink.Drop }},
}

// FaultGiveUp is the fault only a target takes: give-up=NNms, the proxy
// closes the client's connection unanswered after NN ms (at least 1), the
// target's exchange going on.
const FaultGiveUp = "give-up"

// FaultNames lists the lab faults a target may map natively, sorted.
func FaultNames() []string { return slices.Sorted(maps.Keys(placements)) }

// Place says where each fault of the X-Lab-Fault value v ("a,b") acts on
// t; an error wrapping ErrNotPlaceable says why one cannot act here.
func (t *Target) Place(v string) (Placement, error) {
	var p Placement
	if v == "" {
		return p, nil
	}
	if nf, ok := t.Native[AllFaults]; ok {
		p.Header = http.Header{}
		p.Header.Set(nf.Header, strings.ReplaceAll(nf.Value, FaultValue, v))
		return p, nil
	}
	action := sink.Normal
	onSink := false
	for part := range strings.SplitSeq(v, ",") {
		name, arg, hasArg := strings.Cut(part, "=")
		pl, known := placements[name]
		if !known {
			return Placement{}, fmt.Errorf("fault %q: unknown (known: %s)", part, strings.Join(FaultNames(), ", "))
		}
		if nf, ok := t.Native[name]; ok {
			if p.Header == nil {
				p.Header = http.Header{}
			}
			p.Header.Add(nf.Header, strings.ReplaceAll(nf.Value, FaultValue, part))
			continue
		}
		var d time.Duration
		if name == string(protocol.FaultDelay) || name == string(protocol.FaultStall) || name == FaultGiveUp {
			ms, err := millis(arg, hasArg)
			if err != nil {
				return Placement{}, fmt.Errorf("fault %q: %w", part, err)
			}
			d = ms
		} else if hasArg {
			return Placement{}, fmt.Errorf("fault %q: takes no argument", part)
		}
		switch {
		case pl.proxy != nil:
			pl.proxy(&p, d)
		default:
			if !t.Effects.Sink {
				return Placement{}, fmt.Errorf("%w: %s acts at the effect sink, and %s counts its effects itself without mapping %s to a header", ErrNotPlaceable, name, t.Name, name)
			}
			pl.sink(&action, d)
			onSink = true
		}
	}
	if onSink {
		p.Sink = &action
	}
	return p, nil
}

// millis reads the NN of "NNms": decimal milliseconds up to protocol.MaxDelay.
func millis(arg string, hasArg bool) (time.Duration, error) {
	digits, ok := strings.CutSuffix(arg, "ms")
	n, err := strconv.Atoi(digits)
	if !hasArg || !ok || err != nil || n < 0 || len(digits) > 5 || time.Duration(n)*time.Millisecond > protocol.MaxDelay {
		return 0, fmt.Errorf("want NNms, 0 to %d", protocol.MaxDelay.Milliseconds())
	}
	return time.Duration(n) * time.Millisecond, nil
}

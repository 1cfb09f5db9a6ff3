// Package faultheader parses the lab's fault vocabulary: the X-Lab-Fault
// values that make the effect server misbehave on purpose. A fault acts
// only on an admitted request (its key's owner, or unkeyed): a duplicate
// never fires one.
package faultheader

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"idemlab/internal/protocol"
)

// A Point is where a crash fault stops the process in handling a request.
type Point int

// The crash points, in the order a request passes them.
const (
	NoCrash      Point = iota
	BeforeEffect       // admitted, nothing applied
	AfterEffect        // effect durable, result not yet recorded
	AfterRecord        // result recorded, reply not yet sent

	// The downstream mode's points.
	AfterClaim      // claim committed, downstream not yet called
	AfterDownstream // downstream replied, result not yet recorded
)

// A Fault is one parsed X-Lab-Fault value: faults joined by "," acting at
// different points ("stall=800ms,crash-after-effect"). The zero Fault does
// nothing.
type Fault struct {
	Name      string        // the header value as sent, e.g. "delay=15ms"
	Delay     time.Duration // sleep after admission, before the effect
	Stall     time.Duration // sleep once the effect is done, before its result is recorded (inside a store's transaction)
	Crash     Point         // where to exit with ExitCode, or NoCrash
	Fail      Point         // where the effect fails (BeforeEffect or AfterEffect), or NoCrash
	DropReply bool          // apply and record, then close the connection without a reply

	DropDownstreamReply bool // send the downstream service drop-reply
}

// Downstream reports whether f acts only on a server with a downstream.
func (f Fault) Downstream() bool {
	return f.Crash == AfterClaim || f.Crash == AfterDownstream || f.DropDownstreamReply
}

// RegistryOnly reports whether f makes the effect fail, which the
// downstream mode (whose effect is the ledger's) does not do.
func (f Fault) RegistryOnly() bool { return f.Fail != NoCrash }

// Errors of Parse and FromHeader: fixed text (but a quote of at most
// MaxEcho bytes) that a server can reply with byte for byte.
var (
	ErrEmpty    = errors.New("empty fault")
	ErrUnknown  = errors.New("unknown fault")
	ErrArgument = errors.New("bad fault argument")
	ErrMultiple = errors.New("more than one X-Lab-Fault header line")
	ErrClash    = errors.New("two faults act at the same point")
)

// MaxEcho bounds how much of a bad value an error quotes, then "...";
// every valid fault list is shorter.
const MaxEcho = 128

// echo quotes v, cut to its first MaxEcho bytes.
func echo(v string) string {
	if len(v) > MaxEcho {
		return strconv.Quote(v[:MaxEcho]) + "..."
	}
	return strconv.Quote(v)
}

// A builder makes the Fault for one name from what followed "=", if any.
type builder func(arg string, hasArg bool) (Fault, error)

// fixed returns a builder for a fault that takes no argument.
func fixed(f Fault) builder {
	return func(arg string, hasArg bool) (Fault, error) {
		if hasArg {
			return Fault{}, ErrArgument
		}
		return f, nil
	}
}

func delay(arg string, hasArg bool) (Fault, error) {
	d, err := millis(arg, hasArg)
	return Fault{Delay: d}, err
}

func stall(arg string, hasArg bool) (Fault, error) {
	d, err := millis(arg, hasArg)
	return Fault{Stall: d}, err
}

// millis parses NNms: decimal milliseconds, 0..protocol.MaxDelay.
func millis(arg string, hasArg bool) (time.Duration, error) {
	digits, ok := strings.CutSuffix(arg, "ms")
	if !hasArg || !ok || digits == "" || len(digits) > 5 {
		return 0, ErrArgument
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, ErrArgument
		}
	}
	ms, err := strconv.Atoi(digits)
	if err != nil || time.Duration(ms)*time.Millisecond > protocol.MaxDelay {
		return 0, ErrArgument
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// vocabulary is every fault's builder; the compiler refuses a name listed twice.
var vocabulary = map[protocol.Fault]builder{
	protocol.FaultDropReply:            fixed(Fault{DropReply: true}),
	protocol.FaultSlow:                 fixed(Fault{Delay: protocol.SlowDelay}),
	protocol.FaultDelay:                delay,
	protocol.FaultStall:                stall,
	protocol.FaultCrashBeforeEffect:    fixed(Fault{Crash: BeforeEffect}),
	protocol.FaultCrashAfterEffect:     fixed(Fault{Crash: AfterEffect}),
	protocol.FaultCrashAfterRecord:     fixed(Fault{Crash: AfterRecord}),
	protocol.FaultCrashAfterClaim:      fixed(Fault{Crash: AfterClaim}),
	protocol.FaultCrashAfterDownstream: fixed(Fault{Crash: AfterDownstream}),
	protocol.FaultDropDownstreamReply:  fixed(Fault{DropDownstreamReply: true}),
	protocol.FaultFailEffect:           fixed(Fault{Fail: BeforeEffect}),
	protocol.FaultFailAfterEffect:      fixed(Fault{Fail: AfterEffect}),
}

// Names returns the registered fault names, sorted.
func Names() []string {
	names := make([]string, 0, len(vocabulary))
	for name := range vocabulary {
		names = append(names, string(name))
	}
	sort.Strings(names)
	return names
}

// Parse returns the Fault one X-Lab-Fault value names; faults joined by
// "," must each act at its own point.
func Parse(v string) (Fault, error) {
	if v == "" {
		return Fault{}, ErrEmpty
	}
	var f Fault
	taken := map[point]bool{}
	for part := range strings.SplitSeq(v, ",") {
		one, err := parseOne(part)
		if err != nil {
			return Fault{}, err
		}
		name, _, _ := strings.Cut(part, "=")
		p := pointOf[protocol.Fault(name)]
		if taken[p] {
			return Fault{}, fmt.Errorf("%w %s", ErrClash, echo(v))
		}
		taken[p] = true
		f.Delay += one.Delay
		f.Stall += one.Stall
		f.Crash = max(f.Crash, one.Crash)
		f.Fail = max(f.Fail, one.Fail)
		f.DropReply = f.DropReply || one.DropReply
		f.DropDownstreamReply = f.DropDownstreamReply || one.DropDownstreamReply
	}
	f.Name = v
	return f, nil
}

// A point is where a fault acts; a list holds at most one fault per point.
type point int

const (
	beforeEffect    point = iota // delay, slow
	atTheGap                     // stall
	crash                        // every crash point: a process exits once
	reply                        // drop-reply
	downstreamReply              // drop-downstream-reply
)

var pointOf = map[protocol.Fault]point{
	protocol.FaultDelay:             beforeEffect,
	protocol.FaultSlow:              beforeEffect,
	protocol.FaultStall:             atTheGap,
	protocol.FaultCrashBeforeEffect: crash,
	protocol.FaultCrashAfterEffect:  crash,
	protocol.FaultCrashAfterRecord:  crash,
	protocol.FaultDropReply:         reply,
	protocol.FaultFailEffect:        crash, // a request ends once: a crash or a failure
	protocol.FaultFailAfterEffect:   crash,

	protocol.FaultCrashAfterClaim:      crash,
	protocol.FaultCrashAfterDownstream: crash,
	protocol.FaultDropDownstreamReply:  downstreamReply,
}

// parseOne parses one fault of a list.
func parseOne(v string) (Fault, error) {
	if v == "" {
		return Fault{}, ErrEmpty
	}
	name, arg, hasArg := strings.Cut(v, "=")
	b, ok := vocabulary[protocol.Fault(name)]
	if !ok {
		return Fault{}, fmt.Errorf("%w %s", ErrUnknown, echo(name))
	}
	f, err := b(arg, hasArg)
	if err != nil {
		return Fault{}, fmt.Errorf("%w %s", err, echo(v))
	}
	return f, nil
}

// FromHeader returns the fault h asks for; present is false when h has no
// X-Lab-Fault header at all.
func FromHeader(h http.Header) (f Fault, present bool, err error) {
	vs := h.Values(protocol.FaultHeader)
	switch len(vs) {
	case 0:
		return Fault{}, false, nil
	case 1:
		f, err := Parse(vs[0])
		return f, true, err
	default:
		return Fault{}, true, ErrMultiple
	}
}

// Package labfault defines the lab's fault vocabulary: the values of the
// X-Lab-Fault request header that make the effect server misbehave on
// purpose, at named points of handling one request.
//
// A fault acts only on the execution it was sent with, and only once that
// request has been admitted (it became the owner of its key, or carries no
// key). A duplicate that waits for an owner or replays a recorded result
// never fires a fault, neither its own nor the owner's.
//
// The vocabulary is a map keyed by name; registering a name twice is a
// programmer error and panics.
package labfault

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

// A Point is a place in handling one admitted request where a crash fault
// stops the process (with protocol.CrashExitCode).
type Point int

// The crash points, in the order a request passes them.
const (
	NoCrash      Point = iota
	BeforeEffect       // admitted, nothing applied
	AfterEffect        // effect durable, result not yet recorded
	AfterRecord        // result recorded, reply not yet sent
)

// A Fault is one parsed X-Lab-Fault value. The zero Fault does nothing.
type Fault struct {
	Name      string        // the header value as sent, e.g. "delay=15ms"
	Delay     time.Duration // sleep after admission, before the effect
	Crash     Point         // where to exit with ExitCode, or NoCrash
	DropReply bool          // apply and record, then close the connection without a reply
}

// Errors returned by Parse and FromHeader. Their text is fixed (apart from
// a quoted fault name) so a server can reply with it byte for byte.
var (
	ErrEmpty    = errors.New("empty fault")
	ErrUnknown  = errors.New("unknown fault")
	ErrArgument = errors.New("bad fault argument")
	ErrMultiple = errors.New("more than one X-Lab-Fault header line")
)

// A builder makes the Fault for one name; arg is what followed "=", and
// hasArg says whether there was an "=" at all.
type builder func(arg string, hasArg bool) (Fault, error)

var vocabulary = map[protocol.Fault]builder{}

// register adds name to the vocabulary; a second registration panics.
func register(name protocol.Fault, b builder) {
	if _, dup := vocabulary[name]; dup {
		panic("labfault: fault " + string(name) + " registered twice")
	}
	vocabulary[name] = b
}

// fixed returns a builder for a fault that takes no argument.
func fixed(f Fault) builder {
	return func(arg string, hasArg bool) (Fault, error) {
		if hasArg {
			return Fault{}, ErrArgument
		}
		return f, nil
	}
}

// delay parses the NN of "delay=NNms": decimal milliseconds, 0..60000.
func delay(arg string, hasArg bool) (Fault, error) {
	digits, ok := strings.CutSuffix(arg, "ms")
	if !hasArg || !ok || digits == "" || len(digits) > 5 {
		return Fault{}, ErrArgument
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return Fault{}, ErrArgument
		}
	}
	ms, err := strconv.Atoi(digits)
	if err != nil || time.Duration(ms)*time.Millisecond > protocol.MaxDelay {
		return Fault{}, ErrArgument
	}
	return Fault{Delay: time.Duration(ms) * time.Millisecond}, nil
}

func init() {
	register(protocol.FaultDropReply, fixed(Fault{DropReply: true}))
	register(protocol.FaultSlow, fixed(Fault{Delay: protocol.SlowDelay}))
	register(protocol.FaultDelay, delay)
	register(protocol.FaultCrashBeforeEffect, fixed(Fault{Crash: BeforeEffect}))
	register(protocol.FaultCrashAfterEffect, fixed(Fault{Crash: AfterEffect}))
	register(protocol.FaultCrashAfterRecord, fixed(Fault{Crash: AfterRecord}))
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

// Parse returns the Fault named by one X-Lab-Fault value: a name, or
// "delay=NNms".
func Parse(v string) (Fault, error) {
	if v == "" {
		return Fault{}, ErrEmpty
	}
	name, arg, hasArg := strings.Cut(v, "=")
	b, ok := vocabulary[protocol.Fault(name)]
	if !ok {
		return Fault{}, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	f, err := b(arg, hasArg)
	if err != nil {
		return Fault{}, fmt.Errorf("%w %q", err, v)
	}
	f.Name = v
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

package protocol

import (
	"fmt"
	"strings"
)

// A Store names a store design the server offers (its -store flag).
type Store string

// The stores, in evidence order.
const (
	// Volatile is the reference design: a durable counter file and keys
	// in memory only.
	Volatile Store = "volatile"
	// Durable keeps counter, keys and journal in one SQLite database and
	// commits each effect with its key.
	Durable Store = "durable"
	// Postgres keeps them in a PostgreSQL database that replicas share,
	// and commits each effect with its key.
	Postgres Store = "postgres"
)

// Stores lists every store, in evidence order.
var Stores = []Store{Volatile, Durable, Postgres}

// Shared reports whether the store's state lives in a database that
// several server processes may share (replicas), rather than in one
// process's folder.
func (s Store) Shared() bool { return s != Volatile }

// InDatabase reports whether the store's state lives in a database server
// reached by a DSN rather than in the state folder.
func (s Store) InDatabase() bool { return s == Postgres }

// ParseStore returns the store called name, or an error listing the names.
func ParseStore(name string) (Store, error) { return parseName("store", name, Stores) }

// An Outcome classifies what came back from one call, the same on every
// machine.
type Outcome string

// The outcomes.
const (
	OutcomeReply   Outcome = "reply"    // an HTTP response arrived
	OutcomeNoReply Outcome = "no_reply" // the connection closed or reset without a response
	OutcomeTimeout Outcome = "timeout"  // the client gave up waiting
	OutcomeRefused Outcome = "refused"  // nothing was listening
)

// Outcomes lists every outcome.
var Outcomes = []Outcome{OutcomeReply, OutcomeNoReply, OutcomeTimeout, OutcomeRefused}

// ParseOutcome returns the outcome called name, or an error listing the names.
func ParseOutcome(name string) (Outcome, error) { return parseName("outcome", name, Outcomes) }

// A Fault names one lab fault, the part of an X-Lab-Fault value before
// any "=" (package effectserver/faultheader gives each its behaviour). A value may join
// faults that act at different points with ",".
type Fault string

// The faults, in the order a request passes the points they act at.
const (
	FaultDelay             Fault = "delay"               // delay=NNms: sleep after admission
	FaultSlow              Fault = "slow"                // sleep SlowDelay after admission
	FaultCrashBeforeEffect Fault = "crash-before-effect" // exit after admission, nothing applied
	FaultStall             Fault = "stall"               // stall=NNms: sleep once the effect is done, before its result is recorded
	FaultCrashAfterEffect  Fault = "crash-after-effect"  // exit once the effect is durable, result not recorded
	FaultCrashAfterRecord  Fault = "crash-after-record"  // exit once the result is recorded, before the reply
	FaultDropReply         Fault = "drop-reply"          // apply and record, then close without a reply
	FaultFailEffect        Fault = "fail-effect"         // the effect fails: nothing applied, 500, the key released
	FaultFailAfterEffect   Fault = "fail-after-effect"   // the handler fails once the effect is done, before its result is recorded: 500

	// The downstream mode's faults (effectserver -downstream), refused
	// by a server without it.
	FaultCrashAfterClaim      Fault = "crash-after-claim"      // exit once the claim is committed, before the downstream call
	FaultCrashAfterDownstream Fault = "crash-after-downstream" // exit once the downstream replied, result not recorded
	FaultDropDownstreamReply  Fault = "drop-downstream-reply"  // the downstream applies and drops its reply (X-Lab-Fault: drop-reply to it)
)

// Faults lists every fault.
var Faults = []Fault{FaultDelay, FaultSlow, FaultCrashBeforeEffect, FaultStall, FaultCrashAfterEffect, FaultCrashAfterRecord, FaultDropReply,
	FaultFailEffect, FaultFailAfterEffect, FaultCrashAfterClaim, FaultCrashAfterDownstream, FaultDropDownstreamReply}

// ParseFault returns the fault called name (without an argument), or an
// error listing the names.
func ParseFault(name string) (Fault, error) { return parseName("fault", name, Faults) }

// parseName finds name among valid, or says what was wrong and what is valid.
func parseName[T ~string](what, name string, valid []T) (T, error) {
	for _, v := range valid {
		if string(v) == name {
			return v, nil
		}
	}
	names := make([]string, len(valid))
	for i, v := range valid {
		names[i] = string(v)
	}
	return "", fmt.Errorf("unknown %s %q (want one of %s)", what, name, strings.Join(names, ", "))
}

// A Flaw names one classic key-registry bug that a server started with
// -faults and -unsafe-registry NAME builds in on purpose, so that the lab
// can prove its cases catch it. The zero Flaw is the sound registry.
type Flaw string

// The flaws, each named after what it gets wrong.
const (
	Sound Flaw = ""

	// FlawRecordAfterEffect records a key only once its effect is done, so
	// concurrent duplicates miss the in-flight owner and each run the
	// effect: the bug that looks like a fix.
	FlawRecordAfterEffect Flaw = "record-after-effect"
	// FlawNoFingerprint ignores the body: a reused key with another body
	// replays the first result instead of 422.
	FlawNoFingerprint Flaw = "no-fingerprint"
	// FlawEvictOldest makes room for a new key at capacity by forgetting
	// the oldest recorded one instead of answering 429, so a late retry of
	// that key runs the effect again.
	FlawEvictOldest Flaw = "evict-oldest"
	// FlawForgetOnLostReply drops a key's record when its reply could not
	// be delivered, so the client's retry runs the effect again.
	FlawForgetOnLostReply Flaw = "forget-on-lost-reply"
	// FlawRecordBeforeEffect completes a key's record before its effect
	// runs (a phantom success): a duplicate replays a result whose effect
	// has not happened, and still replays it if the effect then fails.
	FlawRecordBeforeEffect Flaw = "record-before-effect"
	// FlawCheckThenAct claims a key in two steps, a check and then a blind
	// insert: concurrent duplicates that all pass the check before any
	// inserts each become the owner and each run the effect.
	FlawCheckThenAct Flaw = "check-then-act"
)

// Flaws lists every flaw, in a fixed order.
var Flaws = []Flaw{FlawRecordAfterEffect, FlawNoFingerprint, FlawEvictOldest, FlawForgetOnLostReply, FlawRecordBeforeEffect, FlawCheckThenAct}

// ParseFlaw returns the flaw called name, or an error listing the names.
func ParseFlaw(name string) (Flaw, error) {
	f, err := parseName("unsafe registry", name, Flaws)
	if err != nil {
		return Sound, err
	}
	return f, nil
}

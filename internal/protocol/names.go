package protocol

import (
	"fmt"
	"strings"
)

// A Store names a store design the server offers (its -store flag).
type Store string

// The stores, in evidence order.
const (
	Volatile Store = "volatile" // a durable counter file; keys in memory only
	Durable  Store = "durable"  // SQLite: each effect committed with its key
	Postgres Store = "postgres" // the same in a PostgreSQL database replicas share
)

// Stores lists every store, in evidence order.
var Stores = []Store{Volatile, Durable, Postgres}

// Shared reports whether several server processes may share the store.
func (s Store) Shared() bool { return s != Volatile }

// InDatabase reports whether the store lives in a database reached by a DSN.
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

// A Fault names one lab fault, the part of an X-Lab-Fault value before any
// "=" (package effectserver/faultheader gives each its behaviour).
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

	// The downstream mode's faults, refused by a server without it.
	FaultCrashAfterClaim      Fault = "crash-after-claim"      // exit once the claim is committed, before the downstream call
	FaultCrashAfterDownstream Fault = "crash-after-downstream" // exit once the downstream replied, result not recorded
	FaultDropDownstreamReply  Fault = "drop-downstream-reply"  // the downstream applies and drops its reply (X-Lab-Fault: drop-reply to it)
)

// Faults lists every fault.
var Faults = []Fault{FaultDelay, FaultSlow, FaultCrashBeforeEffect, FaultStall, FaultCrashAfterEffect, FaultCrashAfterRecord, FaultDropReply,
	FaultFailEffect, FaultFailAfterEffect, FaultCrashAfterClaim, FaultCrashAfterDownstream, FaultDropDownstreamReply}

// parseName finds name among valid, or says what was wrong and what is valid.
func parseName[T ~string](what, name string, valid []T) (T, error) {
	var names []string
	for _, v := range valid {
		if string(v) == name {
			return v, nil
		}
		names = append(names, string(v))
	}
	return "", fmt.Errorf("unknown %s %q (want one of %s)", what, name, strings.Join(names, ", "))
}

// A Flaw names a classic key-registry bug a server builds in on purpose
// (-unsafe-registry; package unsaferegistry). The zero Flaw is sound.
type Flaw string

// The flaws, each named after what it gets wrong.
const (
	Sound                  Flaw = ""
	FlawRecordAfterEffect  Flaw = "record-after-effect"  // concurrent duplicates each run the effect
	FlawNoFingerprint      Flaw = "no-fingerprint"       // another body replays instead of 422
	FlawEvictOldest        Flaw = "evict-oldest"         // a full registry forgets its oldest key instead of 429
	FlawForgetOnLostReply  Flaw = "forget-on-lost-reply" // a dropped reply drops the record
	FlawRecordBeforeEffect Flaw = "record-before-effect" // a phantom success, replayed before the effect
	FlawCheckThenAct       Flaw = "check-then-act"       // check, gap, insert: duplicates both own the key
)

// Flaws lists every flaw, in a fixed order.
var Flaws = []Flaw{FlawRecordAfterEffect, FlawNoFingerprint, FlawEvictOldest, FlawForgetOnLostReply, FlawRecordBeforeEffect, FlawCheckThenAct}

// ParseFlaw returns the flaw called name, or an error listing the names.
func ParseFlaw(name string) (Flaw, error) { return parseName("unsafe registry", name, Flaws) }

// Package protocol is the one place for the contract the effect server and
// its clients share: path and header names, defaults, the Idempotency-Key
// syntax, and the typed names of stores, outcomes, faults and flaws. The
// audit does not import it: it re-derives what it checks, so a mistake
// here cannot hide from it.
package protocol

import "time"

// EffectPath is the one path the server serves: POST applies the effect.
const EffectPath = "/effect"

// Header names, in canonical form.
const (
	KeyHeader        = "Idempotency-Key"
	ReplayedHeader   = "Idempotency-Replayed" // on a 200: "true" replays a recorded result
	FaultHeader      = "X-Lab-Fault"          // honoured only with -faults
	RetryAfterHeader = "Retry-After"          // on a 409, 429, 502 or 503
	// AttemptHeader tags a chaos attempt on a target ("INTENT.ATTEMPT"):
	// the fault proxy records it with the exchange and never forwards it,
	// so that the history can say whether the fault it placed fired.
	AttemptHeader = "X-Lab-Attempt"
)

// Defaults every side starts from (the manifest records them).
const (
	DefaultAddr          = "127.0.0.1:0"          // loopback, any free port
	DefaultCapacity      = 64                     // keys a registry holds, in-flight ones included
	DefaultMaxBody       = 4096                   // largest accepted body, bytes
	DefaultWait          = 5 * time.Second        // how long a duplicate waits for its owner
	DefaultClientTimeout = 5 * time.Second        // how long a lab client waits for a reply
	DefaultBody          = "add-one"              // the body of a call that names none
	SlowDelay            = 120 * time.Millisecond // what the "slow" fault sleeps
	MaxDelay             = 60 * time.Second       // the longest "delay=NNms" accepted
	CrashExitCode        = 23                     // exit status of a process a crash fault stopped
)

// Package protocol is the one place for the contract the effect server and
// its clients share: the path and header names, the defaults every side
// starts from, the Idempotency-Key syntax and its parser, the typed names
// of stores, call outcomes and faults. The lab's HTTP client that speaks it
// is package client.
//
// The server (effectserver), the runner (caserun, runner) and the experiments
// (retries, chaos) import it; the audit does not: it re-derives what it checks
// with its own code, so that a mistake here cannot hide from it.
package protocol

import "time"

// EffectPath is the one path the server serves: POST applies the effect.
const EffectPath = "/effect"

// Header names, in canonical form.
const (
	// KeyHeader carries the request's idempotency key (see ParseKey).
	KeyHeader = "Idempotency-Key"
	// ReplayedHeader on a 200 from EffectPath says whether the reply
	// replays a recorded result ("true") or reports this request's own
	// effect ("false").
	ReplayedHeader = "Idempotency-Replayed"
	// FaultHeader, honoured only by a server started with -faults, names
	// one lab fault for the request (see Fault).
	FaultHeader = "X-Lab-Fault"
	// RetryAfterHeader on a 409, 429, 502 or 503 says how long to wait
	// before retrying.
	RetryAfterHeader = "Retry-After"
)

// Defaults every side starts from: the server's flags, the runner's
// protocol constants (recorded in the manifest), the client's timeout.
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

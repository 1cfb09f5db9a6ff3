package chaos

import (
	"bufio"
	"encoding/json"
	"io"

	"idemlab/internal/protocol"
)

// HistoryVersion is the version of the history's line format (3: an
// attempt says whether the fault armed at the sink for it fired).
const HistoryVersion = 3

// An OpType is an attempt's result in Jepsen's terms.
type OpType string

// The attempt results.
const (
	OK   OpType = "ok"   // a 2xx reply, the intent's effect acknowledged (a target may answer 201: docs/targets.md)
	Fail OpType = "fail" // refused (nothing listened), or a reply below 500 other than 2xx: this attempt took no effect
	// Info: outcome unknown, never counted as failed: no reply, or a 5xx
	// (which may follow an applied effect: fail-after-effect).
	Info OpType = "info"
)

// replyType is the OpType of a reply with status code.
func replyType(status int) OpType {
	switch {
	case status >= 200 && status < 300:
		return OK
	case status >= 500:
		return Info
	}
	return Fail
}

// A Phase names when an attempt ran.
type Phase string

// The phases.
const (
	PhaseChaos Phase = "chaos" // faults and kills
	PhaseQuiet Phase = "quiet" // every replica up, no faults, unresolved intents retried
)

// An Attempt is one HTTP request of one intent, as the client saw it.
type Attempt struct {
	Kind       string           `json:"kind"` // "attempt" in the history
	Intent     int              `json:"intent"`
	Key        string           `json:"key"`
	BodySHA256 string           `json:"body_sha256"` // lowercase hex, as the journal names effects
	Client     int              `json:"client"`      // the client (a worker of its phase, from 0) that made it
	Replica    int              `json:"replica"`
	Attempt    int              `json:"attempt"` // 0-based, per intent, across both phases
	Phase      Phase            `json:"phase"`
	StartUS    int64            `json:"start_us"` // monotonic, from the run's start
	EndUS      int64            `json:"end_us"`
	Fault      string           `json:"fault"` // the X-Lab-Fault value sent; "" for none
	Type       OpType           `json:"type"`
	Outcome    protocol.Outcome `json:"outcome"`
	Status     int              `json:"status"`   // 0 without a reply
	Value      string           `json:"value"`    // the reply's body; "" without a reply
	Replayed   *bool            `json:"replayed"` // the replay marker (the lab's Idempotency-Replayed, or the target's own); null without one
	Error      string           `json:"error"`    // the client's error, shortened; "" on a reply
	// SinkFired says, of an attempt for which the fault proxy armed a
	// fault at the effect sink (crash or fail around the effect, placed
	// there for a target), whether a call of the target to the sink took
	// it; null where nothing was armed (no such fault, the replica was
	// down, or the lab's own server, which takes its faults itself).
	SinkFired *bool `json:"sink_fired"`
}

// A ServerKind names a nemesis or supervisor event.
type ServerKind string

// The server events.
const (
	EventStart       ServerKind = "start"        // a replica's process was ready (first start or restart)
	EventStartFailed ServerKind = "start_failed" // a start that did not get ready
	EventKill        ServerKind = "kill"         // the nemesis sent SIGKILL (planned kill number Planned)
	EventKillSkipped ServerKind = "kill_skipped" // planned kill number Planned did not land; Error says why
	EventFaultKill   ServerKind = "fault_kill"   // a fault killed a target's replica with SIGKILL (the proxy's hold and kill, the sink's kill)
	EventExit        ServerKind = "exit"         // a process exited (after a kill: 137; a crash fault of the lab's server: 23)
	EventStop        ServerKind = "stop"         // SIGTERM at the end of the run; exit_code says how it ended
)

// A ServerEvent is one thing that happened to a replica's process.
type ServerEvent struct {
	Kind     ServerKind `json:"kind"`
	Replica  int        `json:"replica"`
	AtUS     int64      `json:"at_us"`
	PID      int        `json:"pid"`
	Addr     string     `json:"addr"`
	ExitCode int        `json:"exit_code"` // exit and stop only
	Planned  int        `json:"planned"`   // kill and kill_skipped: the planned kill's number in chaosplan.Schedule.Kills; -1 for the others
	Error    string     `json:"error"`     // what went wrong (start_failed, stop), or why a planned kill did not land (kill_skipped)
}

// An Effect is one entry of the journal; only the sink's journal records
// the key the target forwarded, the replica, when it applied the effect
// and when it received the call (µs on the run's clock).
type Effect struct {
	Value      int64   `json:"value"`
	BodySHA256 string  `json:"body_sha256"`
	Key        *string `json:"key"`
	Replica    *int    `json:"replica"`
	AtUS       *int64  `json:"at_us"`
	CalledUS   *int64  `json:"called_us"`
}

// A Place is one place of state after every process exited, and the
// replicas that shared it: the journal of applied effects, the ground
// truth.
type Place struct {
	Place    int
	Replicas []int
	Counter  int64
	Effects  []Effect
}

// Claims are what a store or a target promises: what the checker requires.
type Claims struct {
	Durable     bool `json:"durable"`      // keys survive a restart
	SharedStore bool `json:"shared_store"` // replicas share one store of keys
}

// StoreClaims are the lab's own stores' claims; the volatile store's keys
// live in one process's memory.
func StoreClaims(s protocol.Store) Claims {
	if s == protocol.Volatile {
		return Claims{}
	}
	return Claims{Durable: true, SharedStore: true}
}

// A History is everything the audit's checker needs.
type History struct {
	Header
	Attempts []Attempt     // in start order
	Servers  []ServerEvent // in time order
	Places   []Place
}

// A Header is a history's "run" line: with Seed and Replicas the schedule's
// parameters give every attempt's replica and fault and the kill plan again.
type Header struct {
	Store        protocol.Store `json:"store"`  // "" on a target
	Target       string         `json:"target"` // "" on a store
	Claims       Claims         `json:"claims"`
	Seed         uint64         `json:"seed"`
	Replicas     int            `json:"replicas"`
	Clients      int            `json:"clients"`
	DurationMS   int64          `json:"duration_ms"`   // the chaos phase's planned length
	KillEveryMS  int64          `json:"kill_every_ms"` // the nemesis's mean interval; negative: no kills
	Faults       []string       `json:"faults"`        // the fault kinds the schedule could place, in chaosplan.FaultKinds order
	ChaosStartUS int64          `json:"chaos_start_us"`
	QuietStartUS int64          `json:"quiet_start_us"`
}

// Name is the store's or the target's name.
func (h History) Name() string {
	if h.Target != "" {
		return h.Target
	}
	return string(h.Store)
}

// Write writes h as JSON Lines, each with a "kind": a "run" header (with
// the count of each kind), the attempts and server events in time order
// (an attempt before an event at the same time), then each "place" and
// its "effect" lines. Field order is fixed.
func (h History) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	hdr := h.Header
	if hdr.Faults == nil {
		hdr.Faults = []string{}
	}
	err := enc.Encode(struct {
		Kind    string `json:"kind"`
		Version int    `json:"history_version"`
		Header
		Attempts int `json:"attempts"`
		Servers  int `json:"server_events"`
		Places   int `json:"places"`
	}{"run", HistoryVersion, hdr, len(h.Attempts), len(h.Servers), len(h.Places)})
	for i, j := 0, 0; err == nil && (i < len(h.Attempts) || j < len(h.Servers)); {
		if j >= len(h.Servers) || i < len(h.Attempts) && h.Attempts[i].StartUS <= h.Servers[j].AtUS {
			a := h.Attempts[i]
			a.Kind = "attempt"
			err = enc.Encode(a)
			i++
		} else {
			err = enc.Encode(h.Servers[j])
			j++
		}
	}
	for _, p := range h.Places {
		if err != nil {
			return err
		}
		replicas := p.Replicas
		if replicas == nil {
			replicas = []int{}
		}
		err = enc.Encode(struct {
			Kind     string `json:"kind"`
			Place    int    `json:"place"`
			Replicas []int  `json:"replicas"`
			Counter  int64  `json:"counter"`
			Effects  int    `json:"effects"`
		}{"place", p.Place, replicas, p.Counter, len(p.Effects)})
		for _, e := range p.Effects {
			if err != nil {
				return err
			}
			err = enc.Encode(struct {
				Kind  string `json:"kind"`
				Place int    `json:"place"`
				Effect
			}{"effect", p.Place, e})
		}
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

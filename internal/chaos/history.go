package chaos

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// HistoryVersion is the version of the history's line format.
const HistoryVersion = 2

// An OpType is an attempt's result in Jepsen's terms.
type OpType string

// The attempt results.
const (
	// OK: a 200 reply, the intent's effect acknowledged.
	OK OpType = "ok"
	// Fail: known not to have taken effect by this attempt: refused
	// (nothing listened) or a reply below 500 other than 200 (409 in
	// flight, 422, 429: the service refused the request).
	Fail OpType = "fail"
	// Info: outcome unknown, never counted as failed: the connection
	// closed without a reply (a dropped reply, a crash, a kill), the
	// client gave up waiting, or a reply of 500 or above (a server error,
	// which may follow an applied effect: fail-after-effect). The effect
	// may or may not have happened.
	Info OpType = "info"
)

// ReplyType is the OpType of a reply with status code.
func ReplyType(status int) OpType {
	switch {
	case status == http.StatusOK:
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
	Kind       string           `json:"kind"` // always "attempt"
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

// ServerKinds lists every server event kind.
var ServerKinds = []ServerKind{EventStart, EventStartFailed, EventKill, EventKillSkipped, EventFaultKill, EventExit, EventStop}

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

// An Effect is one entry of the journal: its value (its number in the
// journal, from 1), its body's SHA-256, and, where the journal records
// them (the sink's does, a store's does not), the key the target forwarded
// (null: none), the replica that applied it and when (µs on the run's
// clock).
type Effect struct {
	Value      int64
	BodySHA256 string
	Key        *string
	Replica    *int
	AtUS       *int64
}

// A Place is one place of state after every process exited: the journal
// of applied effects, the ground truth. On a store it is what
// open.ReadState gave (every replica of a shared store at one place; one
// each for the volatile store); on a target it is the sink's journal, one
// place for every replica.
type Place struct {
	Place    int
	Replicas []int
	Counter  int64
	Effects  []Effect
}

// Claims are what a store or a target promises, and so what the audit's
// checker requires of it.
type Claims struct {
	Durable     bool `json:"durable"`      // keys survive a restart
	SharedStore bool `json:"shared_store"` // replicas share one store of keys
}

// StoreClaims are the lab's own stores' claims: the durable and postgres
// stores keep their keys across restarts in one store the replicas share;
// the volatile store keeps them in one process's memory.
func StoreClaims(s protocol.Store) Claims {
	if s == protocol.Volatile {
		return Claims{}
	}
	return Claims{Durable: true, SharedStore: true}
}

// A History is everything the audit's checker needs: what was run, what
// the clients saw, what happened to the processes, and the journal at
// every place.
type History struct {
	Store    protocol.Store // the store; "" on a target
	Target   string         // the target's name; "" on a store
	Claims   Claims
	Seed     uint64
	Replicas int
	Clients  int
	// The schedule's parameters: with Seed and Replicas they give every
	// attempt's replica and fault and the kill plan again.
	DurationMS  int64    // the chaos phase's planned length
	KillEveryMS int64    // the nemesis's mean interval; negative: no kills
	Faults      []string // the fault kinds the schedule could place, in chaosplan.FaultKinds order
	// When the phases began, on the run's clock (µs).
	ChaosStartUS int64
	QuietStartUS int64
	Attempts     []Attempt     // in start order
	Servers      []ServerEvent // in time order
	Places       []Place
}

// Name is the store's or the target's name.
func (h History) Name() string {
	if h.Target != "" {
		return h.Target
	}
	return string(h.Store)
}

// history line shapes, beyond Attempt and ServerEvent.
type (
	headerLine struct {
		Kind         string         `json:"kind"` // "run"
		Version      int            `json:"history_version"`
		Store        protocol.Store `json:"store"`
		Target       string         `json:"target"`
		Claims       Claims         `json:"claims"`
		Seed         uint64         `json:"seed"`
		Replicas     int            `json:"replicas"`
		Clients      int            `json:"clients"`
		DurationMS   int64          `json:"duration_ms"`
		KillEveryMS  int64          `json:"kill_every_ms"`
		Faults       []string       `json:"faults"`
		ChaosStartUS int64          `json:"chaos_start_us"`
		QuietStartUS int64          `json:"quiet_start_us"`
		Attempts     int            `json:"attempts"`
		Servers      int            `json:"server_events"`
		Places       int            `json:"places"`
	}
	placeLine struct {
		Kind     string `json:"kind"` // "place"
		Place    int    `json:"place"`
		Replicas []int  `json:"replicas"`
		Counter  int64  `json:"counter"`
		Effects  int    `json:"effects"`
	}
	effectLine struct {
		Kind       string  `json:"kind"` // "effect"
		Place      int     `json:"place"`
		Value      int64   `json:"value"`
		BodySHA256 string  `json:"body_sha256"`
		Key        *string `json:"key"`
		Replica    *int    `json:"replica"`
		AtUS       *int64  `json:"at_us"`
	}
)

// Write writes h as JSON Lines, one object per line, each with a "kind":
// first a "run" header (the store or the target, its claims, the seed and
// the schedule's parameters, and how many lines of each kind follow), then
// the attempts and the server events merged in time order (an attempt at
// its start_us before an event at the same time), then for each place a
// "place" line followed by its "effect" lines in journal order. Field
// order is fixed.
func (h History) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	put := func(v any) error { return enc.Encode(v) }
	faults := h.Faults
	if faults == nil {
		faults = []string{}
	}
	if err := put(headerLine{"run", HistoryVersion, h.Store, h.Target, h.Claims, h.Seed, h.Replicas, h.Clients, h.DurationMS, h.KillEveryMS,
		faults, h.ChaosStartUS, h.QuietStartUS, len(h.Attempts), len(h.Servers), len(h.Places)}); err != nil {
		return err
	}
	i, j := 0, 0
	for i < len(h.Attempts) || j < len(h.Servers) {
		if j >= len(h.Servers) || i < len(h.Attempts) && h.Attempts[i].StartUS <= h.Servers[j].AtUS {
			a := h.Attempts[i]
			a.Kind = "attempt"
			if err := put(a); err != nil {
				return err
			}
			i++
			continue
		}
		if err := put(h.Servers[j]); err != nil {
			return err
		}
		j++
	}
	for _, p := range h.Places {
		replicas := p.Replicas
		if replicas == nil {
			replicas = []int{}
		}
		if err := put(placeLine{"place", p.Place, replicas, p.Counter, len(p.Effects)}); err != nil {
			return err
		}
		for _, e := range p.Effects {
			if err := put(effectLine{"effect", p.Place, e.Value, e.BodySHA256, e.Key, e.Replica, e.AtUS}); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// storeEffects are a store's journal as history effects: no key, replica
// or time recorded.
func storeEffects(es []store.Effect) []Effect {
	out := make([]Effect, len(es))
	for i, e := range es {
		out[i] = Effect{Value: e.Value, BodySHA256: e.BodySHA256}
	}
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

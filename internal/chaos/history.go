package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// HistoryVersion is the version of the history's line format.
const HistoryVersion = 1

// An OpType is an attempt's result in Jepsen's terms.
type OpType string

// The attempt results.
const (
	// OK: a 200 reply, the intent's effect acknowledged.
	OK OpType = "ok"
	// Fail: known not to have taken effect by this attempt: refused
	// (nothing listened) or a reply other than 200 (409, 429, 503...).
	Fail OpType = "fail"
	// Info: outcome unknown, never counted as failed: the connection
	// closed without a reply (a dropped reply, a crash, a kill) or the
	// client gave up waiting. The effect may or may not have happened.
	Info OpType = "info"
)

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
	Replayed   *bool            `json:"replayed"` // the Idempotency-Replayed header; null without one
	Error      string           `json:"error"`    // the client's error, shortened; "" on a reply
}

// A ServerKind names a nemesis or supervisor event.
type ServerKind string

// The server events.
const (
	EventStart       ServerKind = "start"        // a replica's server printed READY (first start or restart)
	EventStartFailed ServerKind = "start_failed" // a start that did not reach READY
	EventKill        ServerKind = "kill"         // the nemesis sent SIGKILL
	EventExit        ServerKind = "exit"         // a server exited (after a kill: code 137; a crash fault: 23)
	EventStop        ServerKind = "stop"         // SIGTERM at the end of the run; exit_code says how it ended
)

// A ServerEvent is one thing that happened to a replica's process.
type ServerEvent struct {
	Kind     ServerKind `json:"kind"`
	Replica  int        `json:"replica"`
	AtUS     int64      `json:"at_us"`
	PID      int        `json:"pid"`
	Addr     string     `json:"addr"`
	ExitCode int        `json:"exit_code"` // exit and stop only; -1 killed by a signal
	Error    string     `json:"error"`
}

// A Place is one place of state after every server exited, as
// open.ReadState gave it: the journal of applied effects, the ground truth.
// Replicas lists the replicas whose state lives there (every replica for a
// shared store; one each for the volatile store).
type Place struct {
	Place    int            `json:"place"`
	Replicas []int          `json:"replicas"`
	Counter  int64          `json:"counter"`
	Effects  []store.Effect `json:"-"`
}

// A History is everything a checker needs: what the clients saw, what
// happened to the servers, and the journal at every place.
type History struct {
	Store    protocol.Store
	Seed     uint64
	Replicas int
	Attempts []Attempt     // in start order
	Servers  []ServerEvent // in time order
	Places   []Place
}

// history line shapes, beyond Attempt and ServerEvent.
type (
	headerLine struct {
		Kind     string         `json:"kind"` // "run"
		Version  int            `json:"history_version"`
		Store    protocol.Store `json:"store"`
		Seed     uint64         `json:"seed"`
		Replicas int            `json:"replicas"`
		Attempts int            `json:"attempts"`
		Servers  int            `json:"server_events"`
		Places   int            `json:"places"`
	}
	placeLine struct {
		Kind     string `json:"kind"` // "place"
		Place    int    `json:"place"`
		Replicas []int  `json:"replicas"`
		Counter  int64  `json:"counter"`
		Effects  int    `json:"effects"`
	}
	effectLine struct {
		Kind       string `json:"kind"` // "effect"
		Place      int    `json:"place"`
		Value      int64  `json:"value"`
		BodySHA256 string `json:"body_sha256"`
	}
)

// Write writes h as JSON Lines, one object per line, each with a "kind":
// first a "run" header (store, seed, replicas and how many lines of each
// kind follow), then the attempts and the server events merged in time
// order (an attempt at its start_us), then for each place a "place" line
// followed by its "effect" lines in journal order. Field order is fixed.
func (h History) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	put := func(v any) error { return enc.Encode(v) }
	if err := put(headerLine{"run", HistoryVersion, h.Store, h.Seed, h.Replicas, len(h.Attempts), len(h.Servers), len(h.Places)}); err != nil {
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
			if err := put(effectLine{"effect", p.Place, e.Value, e.BodySHA256}); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// maxLine bounds one history line when reading.
const maxLine = 64 * 1024

// ReadHistory reads a history Write wrote. It refuses a file whose line
// counts disagree with its header, an effect of a place not announced just
// before it, and unknown kinds; an error names the line.
func ReadHistory(r io.Reader) (History, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var (
		h         History
		hdr       headerLine
		announced []int // effects each place line announces
		seen      bool
		lineNo    int
	)
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		var k struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(line, &k); err != nil {
			return h, fmt.Errorf("history line %d: %w", lineNo, err)
		}
		if !seen && k.Kind != "run" {
			return h, fmt.Errorf("history line %d: want the \"run\" header first, got kind %q", lineNo, k.Kind)
		}
		strict := func(v any) error {
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				return fmt.Errorf("history line %d (%s): %w", lineNo, k.Kind, err)
			}
			return nil
		}
		switch k.Kind {
		case "run":
			if seen {
				return h, fmt.Errorf("history line %d: a second \"run\" header", lineNo)
			}
			seen = true
			if err := strict(&hdr); err != nil {
				return h, err
			}
			if hdr.Version != HistoryVersion {
				return h, fmt.Errorf("history line %d: history_version %d, want %d", lineNo, hdr.Version, HistoryVersion)
			}
			if _, err := protocol.ParseStore(string(hdr.Store)); err != nil {
				return h, fmt.Errorf("history line %d: %w", lineNo, err)
			}
			h.Store, h.Seed, h.Replicas = hdr.Store, hdr.Seed, hdr.Replicas
		case "attempt":
			var a Attempt
			if err := strict(&a); err != nil {
				return h, err
			}
			h.Attempts = append(h.Attempts, a)
		case string(EventStart), string(EventStartFailed), string(EventKill), string(EventExit), string(EventStop):
			var e ServerEvent
			if err := strict(&e); err != nil {
				return h, err
			}
			h.Servers = append(h.Servers, e)
		case "place":
			var p placeLine
			if err := strict(&p); err != nil {
				return h, err
			}
			announced = append(announced, p.Effects)
			h.Places = append(h.Places, Place{Place: p.Place, Replicas: p.Replicas, Counter: p.Counter, Effects: make([]store.Effect, 0, min(p.Effects, 1<<16))})
		case "effect":
			var e effectLine
			if err := strict(&e); err != nil {
				return h, err
			}
			if len(h.Places) == 0 || h.Places[len(h.Places)-1].Place != e.Place {
				return h, fmt.Errorf("history line %d: an effect of place %d outside that place's lines", lineNo, e.Place)
			}
			p := &h.Places[len(h.Places)-1]
			p.Effects = append(p.Effects, store.Effect{Value: e.Value, BodySHA256: e.BodySHA256})
		default:
			return h, fmt.Errorf("history line %d: unknown kind %q", lineNo, k.Kind)
		}
	}
	if err := sc.Err(); err != nil {
		return h, fmt.Errorf("history line %d: %w", lineNo+1, err)
	}
	if !seen {
		return h, fmt.Errorf("history: empty, no \"run\" header")
	}
	if len(h.Attempts) != hdr.Attempts || len(h.Servers) != hdr.Servers || len(h.Places) != hdr.Places {
		return h, fmt.Errorf("history: %d attempts, %d server events, %d places; the header announces %d, %d, %d",
			len(h.Attempts), len(h.Servers), len(h.Places), hdr.Attempts, hdr.Servers, hdr.Places)
	}
	for i, p := range h.Places {
		if len(p.Effects) != announced[i] {
			return h, fmt.Errorf("history: place %d has %d effect lines; its place line announces %d", p.Place, len(p.Effects), announced[i])
		}
	}
	slices.SortStableFunc(h.Attempts, func(a, b Attempt) int { return cmpInt64(a.StartUS, b.StartUS) })
	return h, nil
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

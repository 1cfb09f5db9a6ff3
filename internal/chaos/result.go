package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"idemlab/internal/protocol"
)

// SchemaVersion is the version of chaos.json's shape.
const SchemaVersion = 3

// Parameters are a run's settings as chaos.json records them (after
// defaults), in milliseconds where they are durations.
type Parameters struct {
	Replicas         int   `json:"replicas"`
	Clients          int   `json:"clients"`
	DurationMS       int64 `json:"duration_ms"`
	MaxAttempts      int   `json:"max_attempts"`
	IntentWithinMS   int64 `json:"intent_within_ms"`
	AttemptTimeoutMS int64 `json:"attempt_timeout_ms"`
	QuietWithinMS    int64 `json:"quiet_within_ms"`
	QuietAttempts    int   `json:"quiet_attempts"`
	KillEveryMS      int64 `json:"kill_every_ms"` // negative: no kills
	ServerWaitMS     int64 `json:"server_wait_ms"`
	MaxIntents       int   `json:"max_intents"`
	MaxHistory       int   `json:"max_history"`
}

func parametersOf(c Config) Parameters {
	return Parameters{c.Replicas, c.Clients, c.Duration.Milliseconds(), c.MaxAttempts,
		c.IntentWithin.Milliseconds(), c.AttemptTimeout.Milliseconds(), c.QuietWithin.Milliseconds(),
		c.QuietAttempts, c.KillEvery.Milliseconds(), c.ServerWait.Milliseconds(), c.MaxIntents, c.MaxHistory}
}

// Capped says whether a cap stopped the chaos phase from issuing work.
type Capped struct {
	Intents bool `json:"intents"` // MaxIntents intents were issued
	History bool `json:"history"` // MaxHistory chaos-phase attempts were made
}

// Result is one run: one run of chaos.json, and the history the audit
// judges.
type Result struct {
	Store        protocol.Store `json:"store"`           // "" on a target
	Target       string         `json:"target"`          // "" on a store
	TargetDir    string         `json:"target_dir"`      // the target's folder relative to the checkout, slash-separated; "" outside it (the caller sets it)
	TargetDigest string         `json:"target_digest"`   // the target folder's digest (target.Digest); "" on a store (the caller sets it)
	Trial        int            `json:"trial,omitempty"` // which of the runs on a target this is, from 1; 0 on a store (the caller sets it)
	Claims       Claims         `json:"claims"`
	ReplicasNote string         `json:"replicas_note"` // why fewer replicas ran than asked, or ""
	Seed         uint64         `json:"seed"`
	Parameters   Parameters     `json:"parameters"`
	Faults       []string       `json:"faults"` // the fault kinds the schedule placed
	Wall         Wall           `json:"wall"`
	Capped       Capped         `json:"capped"`
	History      History        `json:"-"`
}

// Wall is the wall time of each phase, in milliseconds.
type Wall struct {
	ChaosMS int64 `json:"chaos_ms"`
	QuietMS int64 `json:"quiet_ms"`
}

// Name is the store's or the target's name.
func (r Result) Name() string { return r.History.Name() }

func newResult(cfg Config, h History, chaosWall, quietWall time.Duration, cappedIntents, cappedHistory bool) Result {
	p := parametersOf(cfg)
	p.Replicas = h.Replicas
	return Result{Store: h.Store, Target: h.Target, Claims: h.Claims, ReplicasNote: cfg.ReplicasNote(), Seed: cfg.Seed, Parameters: p,
		Faults: h.Faults, Wall: Wall{chaosWall.Milliseconds(), quietWall.Milliseconds()}, Capped: Capped{cappedIntents, cappedHistory}, History: h}
}

// JSON encodes r as one run of chaos.json: indented, fields in a fixed
// order, a final newline. The history is not in it (see WriteHistory).
func (r Result) JSON() []byte {
	if r.Faults == nil {
		r.Faults = []string{}
	}
	return encode(struct {
		SchemaVersion int    `json:"schema_version"`
		Experiment    string `json:"experiment"`
		Result
	}{SchemaVersion, "chaos", r})
}

// NotRunJSON is chaos.json's run of a target the experiment could not run,
// saying why; dir is its folder relative to the checkout ("" outside it).
func NotRunJSON(targetName, dir, why string) []byte {
	return encode(struct {
		SchemaVersion int    `json:"schema_version"`
		Experiment    string `json:"experiment"`
		Target        string `json:"target"`
		TargetDir     string `json:"target_dir"`
		NotRun        string `json:"not_run"`
	}{SchemaVersion, "chaos", targetName, dir, why})
}

func encode(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("chaos: encode result: %v", err)) // plain values cannot fail
	}
	return b.Bytes()
}

// WriteHistory writes r's history (History.Write): enough to re-run the
// checker from the file alone.
func (r Result) WriteHistory(w io.Writer) error { return r.History.Write(w) }

// WriteText prints what r ran and recorded, in a few lines a person reads.
func (r Result) WriteText(w io.Writer) error {
	what := "store " + string(r.Store)
	if r.Target != "" {
		what = "target " + r.Target
	}
	if r.Trial > 0 {
		what += fmt.Sprintf(", trial %d", r.Trial)
	}
	note := ""
	if r.ReplicasNote != "" {
		note = "\n  " + r.ReplicasNote
	}
	h, p := r.History, r.Parameters
	kills, effects := 0, 0
	for _, e := range h.Servers {
		if e.Kind == EventKill || e.Kind == EventFaultKill {
			kills++
		}
	}
	for _, pl := range h.Places {
		effects += len(pl.Effects)
	}
	_, err := fmt.Fprintf(w, "chaos on %s: seed %d, %d replicas, %d clients, %d ms (quiet phase %d ms)%s\n  recorded %d attempts, %d server events (%d kills), %d effects\n",
		what, r.Seed, p.Replicas, p.Clients, r.Wall.ChaosMS, r.Wall.QuietMS, note, len(h.Attempts), len(h.Servers), kills, effects)
	return err
}

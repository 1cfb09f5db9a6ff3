package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"idemlab/internal/protocol"
)

// SchemaVersion is the version of chaos.json's shape.
const SchemaVersion = 1

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

// FaultCounts counts the attempts that carried each fault (a list such
// as "delay=5ms,drop-reply" counts once under each). A fault sent is not
// a fault fired: one acts only on a request that became its key's owner.
type FaultCounts struct {
	Delay             int `json:"delay"`
	Slow              int `json:"slow"`
	CrashBeforeEffect int `json:"crash-before-effect"`
	Stall             int `json:"stall"`
	CrashAfterEffect  int `json:"crash-after-effect"`
	CrashAfterRecord  int `json:"crash-after-record"`
	DropReply         int `json:"drop-reply"`
}

func (f *FaultCounts) add(name string) {
	switch protocol.Fault(name) {
	case protocol.FaultDelay:
		f.Delay++
	case protocol.FaultSlow:
		f.Slow++
	case protocol.FaultCrashBeforeEffect:
		f.CrashBeforeEffect++
	case protocol.FaultStall:
		f.Stall++
	case protocol.FaultCrashAfterEffect:
		f.CrashAfterEffect++
	case protocol.FaultCrashAfterRecord:
		f.CrashAfterRecord++
	case protocol.FaultDropReply:
		f.DropReply++
	}
}

// Counts are a run's numbers. Which of them may vary between runs of one
// seed is in the package comment.
type Counts struct {
	Intents              int         `json:"intents"`
	Attempts             int         `json:"attempts"`
	ChaosAttempts        int         `json:"chaos_attempts"`
	QuietAttempts        int         `json:"quiet_attempts"`
	OK                   int         `json:"ok"`   // attempts with a 200 reply
	Fail                 int         `json:"fail"` // refused, or another status
	Info                 int         `json:"info"` // no reply or timeout: outcome unknown
	FaultedAttempts      int         `json:"faulted_attempts"`
	Faults               FaultCounts `json:"faults"`
	Kills                int         `json:"kills"`          // SIGKILLs the nemesis sent
	CrashExits           int         `json:"crash_exits"`    // servers that exited with protocol.CrashExitCode
	Restarts             int         `json:"restarts"`       // starts after the first of each replica
	StartFailures        int         `json:"start_failures"` // starts that did not reach READY (a crash fault can hit a server before its READY line is read)
	CleanStops           int         `json:"clean_stops"`    // servers that exited 0 on the final SIGTERM
	Effects              int         `json:"effects"`        // journal entries, over every place
	Acked                int         `json:"acked"`
	AppliedOnce          int         `json:"applied_once"`
	Duplicates           int         `json:"duplicates"`
	NotApplied           int         `json:"not_applied"`
	LostAcks             int         `json:"lost_acks"`
	Stuck                int         `json:"stuck"`
	UnresolvedAfterChaos int         `json:"unresolved_after_chaos"` // intents the quiet phase retried
	LatencyP50US         int64       `json:"latency_ok_p50_us"`      // of attempts with a 200 reply
	LatencyP99US         int64       `json:"latency_ok_p99_us"`
	ChaosMS              int64       `json:"chaos_ms"` // wall time of each phase
	QuietMS              int64       `json:"quiet_ms"`
}

// RuleVerdict is one rule's line in chaos.json.
type RuleVerdict struct {
	Rule     Rule `json:"rule"`
	Promised bool `json:"promised"` // the store promises it never fires
	Count    int  `json:"count"`    // findings
}

// Verdict is the checker's judgement of a run.
type Verdict struct {
	OK         bool          `json:"ok"`         // no finding of a promised rule
	Violations int           `json:"violations"` // findings of promised rules
	Shown      int           `json:"shown"`      // findings of rules the store does not promise (volatile's duplicates)
	Rules      []RuleVerdict `json:"rules"`      // every rule, in Rules order
	Findings   []Finding     `json:"findings"`   // the first MaxListed findings, violations first
	Listed     int           `json:"findings_listed"`
}

// MaxListed bounds the findings chaos.json lists.
const MaxListed = 100

// NewVerdict judges c for store s.
func NewVerdict(s protocol.Store, c Check) Verdict {
	v := Verdict{Findings: []Finding{}}
	count := map[Rule]int{}
	for _, f := range c.Findings {
		count[f.Rule]++
		if Promised(s, f.Rule) {
			v.Violations++
		} else {
			v.Shown++
		}
	}
	for _, r := range Rules {
		v.Rules = append(v.Rules, RuleVerdict{r, Promised(s, r), count[r]})
	}
	for _, promised := range []bool{true, false} {
		for _, f := range c.Findings {
			if Promised(s, f.Rule) == promised && len(v.Findings) < MaxListed {
				v.Findings = append(v.Findings, f)
			}
		}
	}
	v.Listed = len(v.Findings)
	v.OK = v.Violations == 0
	return v
}

// Capped says whether a cap stopped the chaos phase from issuing work.
type Capped struct {
	Intents bool `json:"intents"` // MaxIntents intents were issued
	History bool `json:"history"` // MaxHistory chaos-phase attempts were made
}

// Result is one run: what was run, what happened, the verdict, and the
// history it was judged from.
type Result struct {
	Store      protocol.Store
	Seed       uint64
	Parameters Parameters
	Counts     Counts
	Verdict    Verdict
	Capped     Capped
	History    History
}

func newResult(cfg Config, h History, unresolved int, chaosWall, quietWall time.Duration, cappedIntents, cappedHistory bool) Result {
	c := CheckHistory(h)
	res := Result{Store: cfg.Store, Seed: cfg.Seed, Parameters: parametersOf(cfg),
		Verdict: NewVerdict(cfg.Store, c), Capped: Capped{cappedIntents, cappedHistory}, History: h}
	n := &res.Counts
	n.Intents, n.Acked, n.AppliedOnce, n.Duplicates, n.NotApplied, n.LostAcks, n.Stuck =
		c.Intents, c.Acked, c.AppliedOnce, c.Duplicates, c.NotApplied, c.LostAcks, c.Stuck
	n.UnresolvedAfterChaos = unresolved
	n.ChaosMS, n.QuietMS = chaosWall.Milliseconds(), quietWall.Milliseconds()
	countHistory(n, h)
	return res
}

// countHistory fills the counts that come straight from the history.
func countHistory(n *Counts, h History) {
	var lat []int64
	for _, a := range h.Attempts {
		n.Attempts++
		if a.Phase == PhaseQuiet {
			n.QuietAttempts++
		} else {
			n.ChaosAttempts++
		}
		switch a.Type {
		case OK:
			n.OK++
			lat = append(lat, a.EndUS-a.StartUS)
		case Fail:
			n.Fail++
		default:
			n.Info++
		}
		if a.Fault != "" {
			n.FaultedAttempts++
			for _, k := range faultKinds(a.Fault) {
				n.Faults.add(k)
			}
		}
	}
	n.LatencyP50US, n.LatencyP99US = percentile(lat, 50), percentile(lat, 99)
	started := map[int]bool{}
	for _, e := range h.Servers {
		switch e.Kind {
		case EventKill:
			n.Kills++
		case EventExit:
			if e.ExitCode == protocol.CrashExitCode {
				n.CrashExits++
			}
		case EventStart:
			if started[e.Replica] {
				n.Restarts++
			}
			started[e.Replica] = true
		case EventStartFailed:
			n.StartFailures++
		case EventStop:
			if e.ExitCode == 0 {
				n.CleanStops++
			}
		}
	}
	for _, p := range h.Places {
		n.Effects += len(p.Effects)
	}
}

// percentile is the nearest-rank p-th percentile of xs (0 for none).
func percentile(xs []int64, p int) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 · n)
	return s[max(rank, 1)-1]
}

// JSON encodes r as chaos.json: indented, fields in a fixed order, a final
// newline. The history is not in it (see WriteHistory).
func (r Result) JSON() []byte {
	doc := struct {
		SchemaVersion int            `json:"schema_version"`
		Experiment    string         `json:"experiment"`
		Store         protocol.Store `json:"store"`
		Seed          uint64         `json:"seed"`
		Parameters    Parameters     `json:"parameters"`
		Counts        Counts         `json:"counts"`
		Verdict       Verdict        `json:"verdict"`
		Capped        Capped         `json:"capped"`
	}{SchemaVersion, "chaos", r.Store, r.Seed, r.Parameters, r.Counts, r.Verdict, r.Capped}
	if doc.Verdict.Findings == nil {
		doc.Verdict.Findings = []Finding{}
	}
	if doc.Verdict.Rules == nil {
		doc.Verdict.Rules = []RuleVerdict{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		panic(fmt.Sprintf("chaos: encode result: %v", err)) // plain values cannot fail
	}
	return b.Bytes()
}

// WriteHistory writes r's history as JSON Lines (see History.Write): the
// attempts, the server events and the journal snapshot, enough to re-run
// the checker from the file alone.
func (r Result) WriteHistory(w io.Writer) error { return r.History.Write(w) }

// WriteText prints r as a few lines a person reads.
func (r Result) WriteText(w io.Writer) error {
	n, p := r.Counts, r.Parameters
	verdict := "ok"
	if !r.Verdict.OK {
		verdict = fmt.Sprintf("FAIL (%d violations)", r.Verdict.Violations)
	}
	_, err := fmt.Fprintf(w, `chaos %s: seed %d, %d replicas, %d clients, %d ms
  intents %d, attempts %d (chaos %d, quiet %d), ok %d, fail %d, info %d
  faults sent %d (drop-reply %d, delay %d, slow %d, stall %d, crash-before-effect %d, crash-after-effect %d, crash-after-record %d)
  kills %d, crash exits %d, restarts %d, start failures %d
  applied once %d, duplicates %d, lost acks %d, stuck %d, unresolved after chaos %d
  latency of ok attempts p50 %.1f ms, p99 %.1f ms
  verdict: %s
`, r.Store, r.Seed, p.Replicas, p.Clients, p.DurationMS,
		n.Intents, n.Attempts, n.ChaosAttempts, n.QuietAttempts, n.OK, n.Fail, n.Info,
		n.FaultedAttempts, n.Faults.DropReply, n.Faults.Delay, n.Faults.Slow, n.Faults.Stall, n.Faults.CrashBeforeEffect, n.Faults.CrashAfterEffect, n.Faults.CrashAfterRecord,
		n.Kills, n.CrashExits, n.Restarts, n.StartFailures,
		n.AppliedOnce, n.Duplicates, n.LostAcks, n.Stuck, n.UnresolvedAfterChaos,
		float64(n.LatencyP50US)/1000, float64(n.LatencyP99US)/1000, verdict)
	return err
}

package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/target"
)

// SchemaVersion is the version of chaos.json's shape.
const SchemaVersion = 2

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
	FailEffect        int `json:"fail-effect"`
	FailAfterEffect   int `json:"fail-after-effect"`
	GiveUp            int `json:"give-up"`
}

func (f *FaultCounts) add(name string) {
	switch name {
	case string(protocol.FaultDelay):
		f.Delay++
	case string(protocol.FaultSlow):
		f.Slow++
	case string(protocol.FaultCrashBeforeEffect):
		f.CrashBeforeEffect++
	case string(protocol.FaultStall):
		f.Stall++
	case string(protocol.FaultCrashAfterEffect):
		f.CrashAfterEffect++
	case string(protocol.FaultCrashAfterRecord):
		f.CrashAfterRecord++
	case string(protocol.FaultDropReply):
		f.DropReply++
	case string(protocol.FaultFailEffect):
		f.FailEffect++
	case string(protocol.FaultFailAfterEffect):
		f.FailAfterEffect++
	case target.FaultGiveUp:
		f.GiveUp++
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
	PlannedKills         int         `json:"planned_kills"`  // the nemesis's plan for the chaos phase (Schedule.Kills)
	Kills                int         `json:"kills"`          // SIGKILLs the nemesis sent
	KillsSkipped         int         `json:"kills_skipped"`  // planned kills that did not land (the history says why)
	FaultKills           int         `json:"fault_kills"`    // a target's replicas a fault killed (the proxy's hold and kill, the sink's kill)
	CrashExits           int         `json:"crash_exits"`    // the lab's servers that exited with protocol.CrashExitCode
	Restarts             int         `json:"restarts"`       // starts after the first of each replica
	StartFailures        int         `json:"start_failures"` // starts that did not reach READY (a crash fault can hit a server before its READY line is read)
	CleanStops           int         `json:"clean_stops"`    // processes that ended cleanly on the final SIGTERM (exit 0; a target also by the signal, 143)
	Effects              int         `json:"effects"`        // journal entries, over every place
	Acked                int         `json:"acked"`
	AppliedOnce          int         `json:"applied_once"`
	Duplicates           int         `json:"duplicates"`
	NotApplied           int         `json:"not_applied"`
	LostAcks             int         `json:"lost_acks"`
	Stuck                int         `json:"stuck"`
	UnresolvedAfterChaos int         `json:"unresolved_after_chaos"` // intents the quiet phase retried: every one unresolved after the chaos phase, unless its bound ended first
	LatencyP50US         int64       `json:"latency_ok_p50_us"`      // of attempts with a 200 reply
	LatencyP99US         int64       `json:"latency_ok_p99_us"`
	ChaosMS              int64       `json:"chaos_ms"` // wall time of each phase
	QuietMS              int64       `json:"quiet_ms"`
}

// RuleVerdict is one rule's line in chaos.json.
type RuleVerdict struct {
	Rule     Rule `json:"rule"`
	Promised bool `json:"promised"` // the store's or the target's claims promise it never fires
	Count    int  `json:"count"`    // findings
}

// Verdict is the checker's judgement of a run.
type Verdict struct {
	OK         bool          `json:"ok"`         // no finding of a promised rule
	Violations int           `json:"violations"` // findings of promised rules
	Shown      int           `json:"shown"`      // findings of rules not promised (the duplicates of a volatile store or target): the lesson
	Rules      []RuleVerdict `json:"rules"`      // every rule, in Rules order
	Findings   []Finding     `json:"findings"`   // the first MaxListed findings, violations first
	Listed     int           `json:"findings_listed"`
}

// MaxListed bounds the findings chaos.json lists.
const MaxListed = 100

// NewVerdict judges c, the check of h, by h's claims.
func NewVerdict(h History, c Check) Verdict {
	v := Verdict{Findings: []Finding{}}
	count := map[Rule]int{}
	for _, f := range c.Findings {
		count[f.Rule]++
		if h.Promised(f.Rule) {
			v.Violations++
		} else {
			v.Shown++
		}
	}
	for _, r := range Rules {
		v.Rules = append(v.Rules, RuleVerdict{r, h.Promised(r), count[r]})
	}
	for _, promised := range []bool{true, false} {
		for _, f := range c.Findings {
			if h.Promised(f.Rule) == promised && len(v.Findings) < MaxListed {
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
	Store        protocol.Store // "" on a target
	Target       string         // "" on a store
	TargetDir    string         // the target's folder relative to the checkout, slash-separated; "" outside it (the caller sets it)
	TargetDigest string         // the target folder's digest (target.Digest); "" on a store (the caller sets it)
	Claims       Claims
	ReplicasNote string // why fewer replicas ran than asked, or ""
	Seed         uint64
	Parameters   Parameters
	Faults       []string // the fault kinds the schedule placed
	Counts       Counts
	Verdict      Verdict
	Capped       Capped
	History      History
}

// Name is the store's or the target's name.
func (r Result) Name() string { return r.History.Name() }

func newResult(cfg Config, h History, chaosWall, quietWall time.Duration, cappedIntents, cappedHistory bool) Result {
	c := CheckHistory(h)
	p := parametersOf(cfg)
	p.Replicas = h.Replicas
	res := Result{Store: h.Store, Target: h.Target, Claims: h.Claims, ReplicasNote: cfg.ReplicasNote(), Seed: cfg.Seed, Parameters: p,
		Faults: h.Faults, Verdict: NewVerdict(h, c), Capped: Capped{cappedIntents, cappedHistory}, History: h}
	n := &res.Counts
	n.Intents, n.Acked, n.AppliedOnce, n.Duplicates, n.NotApplied, n.LostAcks, n.Stuck =
		c.Intents, c.Acked, c.AppliedOnce, c.Duplicates, c.NotApplied, c.LostAcks, c.Stuck
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
	retried := map[int]bool{}
	for _, a := range h.Attempts {
		if a.Phase == PhaseQuiet {
			retried[a.Intent] = true
		}
	}
	n.UnresolvedAfterChaos = len(retried)
	started := map[int]bool{}
	n.PlannedKills = len(h.Schedule().Kills(time.Duration(h.DurationMS)*time.Millisecond, time.Duration(h.KillEveryMS)*time.Millisecond))
	for _, e := range h.Servers {
		switch e.Kind {
		case EventKill:
			n.Kills++
		case EventKillSkipped:
			n.KillsSkipped++
		case EventFaultKill:
			n.FaultKills++
		case EventExit:
			if h.Target == "" && e.ExitCode == protocol.CrashExitCode {
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
			if e.ExitCode == 0 || h.Target != "" && e.ExitCode == TermExitCode {
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

// JSON encodes r as one run of chaos.json: indented, fields in a fixed
// order, a final newline. The history is not in it (see WriteHistory).
func (r Result) JSON() []byte {
	doc := struct {
		SchemaVersion int            `json:"schema_version"`
		Experiment    string         `json:"experiment"`
		Store         protocol.Store `json:"store"`
		Target        string         `json:"target"`
		TargetDir     string         `json:"target_dir"`
		TargetDigest  string         `json:"target_digest"`
		Claims        Claims         `json:"claims"`
		ReplicasNote  string         `json:"replicas_note"`
		Seed          uint64         `json:"seed"`
		Parameters    Parameters     `json:"parameters"`
		Faults        []string       `json:"faults"`
		Counts        Counts         `json:"counts"`
		Verdict       Verdict        `json:"verdict"`
		Capped        Capped         `json:"capped"`
	}{SchemaVersion, "chaos", r.Store, r.Target, r.TargetDir, r.TargetDigest, r.Claims, r.ReplicasNote, r.Seed, r.Parameters, r.Faults, r.Counts, r.Verdict, r.Capped}
	if doc.Faults == nil {
		doc.Faults = []string{}
	}
	if doc.Verdict.Findings == nil {
		doc.Verdict.Findings = []Finding{}
	}
	if doc.Verdict.Rules == nil {
		doc.Verdict.Rules = []RuleVerdict{}
	}
	return encode(doc)
}

// NotRunJSON is chaos.json's run of a target the experiment could not run,
// saying why (a missing program, or NotRunnable); dir is its folder
// relative to the checkout ("" outside it).
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
	if r.Verdict.Shown > 0 {
		verdict += fmt.Sprintf(", %d findings shown (not promised)", r.Verdict.Shown)
	}
	what := "store " + string(r.Store)
	if r.Target != "" {
		what = "target " + r.Target
	}
	note := ""
	if r.ReplicasNote != "" {
		note = "\n  " + r.ReplicasNote
	}
	var faults []string
	for _, k := range FaultKinds {
		if c := n.Faults.count(k); c > 0 || slices.Contains(r.Faults, k) {
			faults = append(faults, fmt.Sprintf("%s %d", k, c))
		}
	}
	_, err := fmt.Fprintf(w, `chaos on %s: seed %d, %s, %s, %d ms%s
  intents %d, attempts %d (chaos %d, quiet %d), ok %d, fail %d, info %d
  faults sent %d (%s)
  kills %d of %d planned (%d skipped), fault kills %d, crash exits %d, restarts %d, start failures %d
  applied once %d, duplicates %d, lost acks %d, stuck %d, unresolved after chaos %d
  latency of ok attempts p50 %.1f ms, p99 %.1f ms
  verdict: %s
`, what, r.Seed, svgCount(p.Replicas, "replica"), svgCount(p.Clients, "client"), p.DurationMS, note,
		n.Intents, n.Attempts, n.ChaosAttempts, n.QuietAttempts, n.OK, n.Fail, n.Info,
		n.FaultedAttempts, strings.Join(faults, ", "),
		n.Kills, n.PlannedKills, n.KillsSkipped, n.FaultKills, n.CrashExits, n.Restarts, n.StartFailures,
		n.AppliedOnce, n.Duplicates, n.LostAcks, n.Stuck, n.UnresolvedAfterChaos,
		float64(n.LatencyP50US)/1000, float64(n.LatencyP99US)/1000, verdict)
	if err != nil {
		return err
	}
	for i, f := range r.Verdict.Findings {
		if i == maxTextFindings {
			_, err = fmt.Fprintf(w, "  ... %d more findings in chaos.json\n", len(r.Verdict.Findings)-i)
			break
		}
		kind := "violation"
		if !r.History.Promised(f.Rule) {
			kind = "shown"
		}
		if _, err = fmt.Fprintf(w, "  %s %s: intent %d (key %s): %s\n", kind, f.Rule, f.Intent, f.Key, f.Detail); err != nil {
			break
		}
	}
	return err
}

// maxTextFindings bounds the findings WriteText prints.
const maxTextFindings = 5

// count is the count of fault kind k.
func (f FaultCounts) count(k string) int {
	switch k {
	case string(protocol.FaultDelay):
		return f.Delay
	case string(protocol.FaultSlow):
		return f.Slow
	case string(protocol.FaultCrashBeforeEffect):
		return f.CrashBeforeEffect
	case string(protocol.FaultStall):
		return f.Stall
	case string(protocol.FaultCrashAfterEffect):
		return f.CrashAfterEffect
	case string(protocol.FaultCrashAfterRecord):
		return f.CrashAfterRecord
	case string(protocol.FaultDropReply):
		return f.DropReply
	case string(protocol.FaultFailEffect):
		return f.FailEffect
	case string(protocol.FaultFailAfterEffect):
		return f.FailAfterEffect
	case target.FaultGiveUp:
		return f.GiveUp
	}
	return 0
}

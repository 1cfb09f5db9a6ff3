package audit

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// This file draws a chaos run's seeded schedule again, from the seed and
// the parameters its history's header records, with the audit's own copy
// of the lab's table (internal/chaos, schedule.go, as docs/chaos.md
// describes it), and compares it with what the history shows: each
// chaos-phase attempt's replica and fault, each quiet-phase attempt's,
// and the nemesis's plan, each planned kill landed or skipped with its
// reason.

// The schedule's generators: a PCG seeded (seed, stream | a<<24 | b mod
// 2^24), one per attempt (a = intent, b = attempt) and one per planned
// kill (a = its number, b = 0).
const (
	streamAttempt uint64 = 1 << 62
	streamKill    uint64 = 2 << 62
)

func scheduleRNG(seed, stream, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream|a<<24|b&(1<<24-1)))
}

// scheduleRows is the fault table: per 10,000 attempts, the kinds a row's
// value holds and how it is drawn (its arguments from the attempt's
// generator, after the replica and the row).
var scheduleRows = []struct {
	per10k int
	kinds  []string
	draw   func(r *rand.Rand) string
}{
	{700, []string{"drop-reply"}, func(*rand.Rand) string { return "drop-reply" }},
	{600, []string{"delay"}, func(r *rand.Rand) string { return fmt.Sprintf("delay=%dms", 1+r.IntN(50)) }},
	{200, []string{"slow"}, func(*rand.Rand) string { return "slow" }},
	{300, []string{"delay"}, func(r *rand.Rand) string { return fmt.Sprintf("delay=%dms", 300+r.IntN(400)) }},
	{200, []string{"stall"}, func(r *rand.Rand) string { return fmt.Sprintf("stall=%dms", 5+r.IntN(100)) }},
	{150, []string{"delay", "drop-reply"}, func(r *rand.Rand) string { return fmt.Sprintf("delay=%dms,drop-reply", 1+r.IntN(50)) }},
	{40, []string{"crash-before-effect"}, func(*rand.Rand) string { return "crash-before-effect" }},
	{40, []string{"crash-after-effect"}, func(*rand.Rand) string { return "crash-after-effect" }},
	{30, []string{"stall", "crash-after-effect"}, func(r *rand.Rand) string {
		return fmt.Sprintf("stall=%dms,crash-after-effect", 20+r.IntN(200))
	}},
	{40, []string{"crash-after-record"}, func(*rand.Rand) string { return "crash-after-record" }},
	{150, []string{"fail-effect"}, func(*rand.Rand) string { return "fail-effect" }},
	{100, []string{"fail-after-effect"}, func(*rand.Rand) string { return "fail-after-effect" }},
	{200, []string{"give-up"}, func(r *rand.Rand) string { return fmt.Sprintf("give-up=%dms", 5+r.IntN(150)) }},
}

// scheduledAttempt is the replica and the fault the schedule gives
// attempt n of intent i in the chaos phase: a row whose kinds are not all
// among h's fault kinds sends no fault (its value is drawn all the same).
func (h *chaosHistory) scheduledAttempt(i, n int64) (int64, string) {
	r := scheduleRNG(h.seed, streamAttempt, uint64(i), uint64(n))
	replica := int64(r.IntN(max(h.replicas, 1)))
	x := r.IntN(10000)
	for _, row := range scheduleRows {
		if x < row.per10k {
			v := row.draw(r)
			for _, k := range row.kinds {
				if !slices.Contains(h.faultKinds, k) {
					return replica, ""
				}
			}
			return replica, v
		}
		x -= row.per10k
	}
	return replica, ""
}

// quietReplica is the replica of attempt n of intent i in the quiet phase:
// the replicas in turn, no fault.
func (h *chaosHistory) quietReplica(i, n int64) int64 { return (i + n) % int64(max(h.replicas, 1)) }

// plannedKill is one kill of the nemesis's plan: its time after the chaos
// phase began (ns) and its replica.
type plannedKill struct {
	at      int64
	replica int64
}

// killPlan is the nemesis's plan for h's chaos phase: kills spaced
// every/2 + U[0, every) apart, each at a replica drawn uniformly (and a
// down time the history does not record), until the phase's end; none
// when kill_every_ms is not positive; at most chaosMaxKills.
func (h *chaosHistory) killPlan() []plannedKill {
	var out []plannedKill
	every, d := h.killEveryMS*1_000_000, h.durationMS*1_000_000
	if every <= 0 {
		return out
	}
	var at int64
	for k := 0; k < chaosMaxKills; k++ {
		r := scheduleRNG(h.seed, streamKill, uint64(k), 0)
		at += every/2 + r.Int64N(every)
		if at >= d {
			break
		}
		out = append(out, plannedKill{at, int64(r.IntN(max(h.replicas, 1)))})
		r.Int64N(180_000_000) // the down time
	}
	return out
}

// killSkipReasons are why a planned kill may not land (the lab's words).
var killSkipReasons = []string{
	"the replica was down",
	"the replica was the last one up",
	"the replica's process ended first (a crash fault)",
	"the chaos phase ended first",
}

// scheduleCheck compares, line by line, a history with its schedule, and
// each replica's events with one another: a kill is followed by that
// process's exit (137, SIGKILL) before the replica starts again, and a
// process ends by SIGKILL only after a kill or a fault's kill of it.
type scheduleCheck struct {
	h        *chaosHistory
	plan     []plannedKill
	next     int             // the next planned kill a kill or kill_skipped event must name
	seen     map[int64]int64 // intent -> attempts seen
	killed   map[int64]bool  // replica -> its running process was killed (by the nemesis or a fault)
	awaiting map[int64]bool  // replica -> a kill of the nemesis awaits its exit
	bad      []string        // what differs, the first maxChaosLines in line order
	more     int             // how many more differ
}

func newScheduleCheck(h *chaosHistory) *scheduleCheck {
	return &scheduleCheck{h: h, plan: h.killPlan(), seen: map[int64]int64{}, killed: map[int64]bool{}, awaiting: map[int64]bool{}}
}

// sigkillExit is the exit code of a process SIGKILL ended (128+9).
const sigkillExit = 137

func (s *scheduleCheck) badf(no int, format string, args ...any) {
	if len(s.bad) == maxChaosLines {
		s.more++
		return
	}
	s.bad = append(s.bad, fmt.Sprintf("line %d: ", no)+fmt.Sprintf(format, args...))
}

// attempt checks one attempt line: numbered on from its intent's last, in
// its phase's time, at the replica and with the fault the schedule says.
func (s *scheduleCheck) attempt(no int, intent, n, replica int64, phase, fault string, start int64) {
	want := s.seen[intent]
	s.seen[intent] = want + 1
	if n != want {
		s.badf(no, "intent %d: attempt %d, expected attempt %d (an intent's attempts are numbered from 0 in the order they start)", intent, n, want)
		return
	}
	switch phase {
	case "chaos":
		if start < s.h.chaosStartUS || start > s.h.quietStartUS {
			s.badf(no, "intent %d attempt %d: a chaos-phase attempt starting at %d µs, outside the phase (%d to %d µs)", intent, n, start, s.h.chaosStartUS, s.h.quietStartUS)
		}
		if r, f := s.h.scheduledAttempt(intent, n); r != replica || f != fault {
			s.badf(no, "intent %d attempt %d: replica %d, fault %q; the schedule (seed %d, %d replicas, faults %s) says replica %d, fault %q",
				intent, n, replica, fault, s.h.seed, s.h.replicas, orNone(s.h.faultKinds), r, f)
		}
	default:
		if start < s.h.quietStartUS {
			s.badf(no, "intent %d attempt %d: a quiet-phase attempt starting at %d µs, before the phase (%d µs)", intent, n, start, s.h.quietStartUS)
		}
		if r := s.h.quietReplica(intent, n); r != replica || fault != "" {
			s.badf(no, "intent %d attempt %d: replica %d, fault %q; the quiet phase sends no fault, to replica %d", intent, n, replica, fault, r)
		}
	}
}

// event checks a kill or kill_skipped line: it names the next planned
// kill, of that kill's replica, not before its time; a skip says one of
// the lab's reasons.
func (s *scheduleCheck) event(no int, kind string, replica, at, planned, code int64, why string) {
	switch {
	case s.awaiting[replica] && kind != "exit":
		s.badf(no, "%s of replica %d: its process was killed, and its exit is not recorded first", kind, replica)
		s.awaiting[replica] = false
	case kind == "exit" && s.awaiting[replica] && code != sigkillExit:
		s.badf(no, "exit of replica %d with code %d after a kill: want %d (SIGKILL)", replica, code, sigkillExit)
	case kind == "exit" && code == sigkillExit && !s.killed[replica]:
		s.badf(no, "exit of replica %d by SIGKILL (%d) with no kill or fault's kill of it since it started", replica, code)
	}
	switch kind {
	case "start":
		s.killed[replica] = false
	case "exit":
		s.awaiting[replica] = false
	case "kill":
		s.killed[replica], s.awaiting[replica] = true, true
	case "fault_kill":
		s.killed[replica] = true
	}
	if kind != "kill" && kind != "kill_skipped" {
		return
	}
	if s.next >= len(s.plan) || planned != int64(s.next) {
		s.badf(no, "%s of planned kill %d: expected planned kill %d of the %d the schedule has (seed %d, %d ms, every %d ms)",
			kind, planned, s.next, len(s.plan), s.h.seed, s.h.durationMS, s.h.killEveryMS)
		s.next = max(s.next, int(planned)+1)
		return
	}
	p := s.plan[s.next]
	s.next++
	if replica != p.replica {
		s.badf(no, "%s of planned kill %d: replica %d, the schedule says replica %d", kind, planned, replica, p.replica)
	}
	due := s.h.chaosStartUS + p.at/1000
	switch {
	case kind == "kill" && at < due:
		s.badf(no, "kill of planned kill %d at %d µs: before its time, %d µs", planned, at, due)
	case kind == "kill_skipped" && !slices.Contains(killSkipReasons, why):
		s.badf(no, "kill_skipped of planned kill %d: reason %q is none of the lab's (%q...)", planned, why, killSkipReasons[0])
	case kind == "kill_skipped" && why != killSkipReasons[3] && at < due:
		s.badf(no, "kill_skipped of planned kill %d at %d µs: decided before its time, %d µs", planned, at, due)
	}
}

// finish checks that every planned kill was accounted for.
func (s *scheduleCheck) finish() {
	if s.next < len(s.plan) {
		if len(s.bad) == maxChaosLines {
			s.bad = s.bad[:maxChaosLines-1]
			s.more++
		}
		s.bad = append(s.bad, fmt.Sprintf("planned kills %d to %d of %d: neither a kill nor a kill_skipped event", s.next, len(s.plan)-1, len(s.plan)))
	}
}

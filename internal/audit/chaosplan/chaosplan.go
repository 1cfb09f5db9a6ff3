// Package chaosplan is the chaos experiment's seeded plan, the one place
// it is drawn: the lab (internal/chaos) runs it, and the audit draws it
// again from a history's seed and parameters to check that the lab kept
// to it. For every attempt of every intent it gives the replica, the
// fault and the backoff before it; for the nemesis, the kills. Every
// decision comes from a PCG generator (math/rand/v2) seeded with (seed,
// stream | a<<24 | b mod 2^24), the stream tag keeping attempts (a, b: the
// intent and the attempt) apart from kills (a: the kill's number), so a
// decision does not depend on which client runs an intent, when, or what
// the servers did. It imports no lab package: the audit owns it.
package chaosplan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// A Schedule is the plan of one run.
type Schedule struct {
	Seed     uint64
	Replicas int // replicas to choose among, at least 1
	// Faults are the fault kinds the run places, of FaultKinds (StoreFaults
	// on the lab's own server); an attempt whose drawn fault holds another
	// kind carries none.
	Faults []string
}

// A Decision is what the schedule says about one attempt.
type Decision struct {
	Replica int           // the replica the attempt goes to
	Fault   string        // the X-Lab-Fault value; "" sends none
	Backoff time.Duration // the wait before this attempt (0 before the first)
}

// FaultKinds lists every fault kind the schedule draws, in the order
// chaos.json counts them. An attempt's fault is a list of them joined by
// commas; delay, stall and give-up take "=NNms" (TakesArg).
var FaultKinds = []string{"delay", "slow", "crash-before-effect", "stall", "crash-after-effect", "crash-after-record",
	"drop-reply", "fail-effect", "fail-after-effect", "give-up"}

// StoreFaults are the kinds the lab's own server takes: all but give-up,
// which the fault proxy in front of a target places.
var StoreFaults = FaultKinds[:9]

// TakesArg reports whether fault kind k takes "=NNms".
func TakesArg(k string) bool { return k == "delay" || k == "stall" || k == "give-up" }

// faultMix is the chaos phase's fault table: the share of attempts (in
// parts per 10,000) that carry each fault, the rest carry none, and the
// kinds each value holds. Arguments are drawn per attempt, after the
// table's draw. The crash faults are rare on purpose: each stops a
// replica. The last three rows came later: they come after the others, so
// that every attempt that drew one of the first rows draws it still.
var faultMix = []struct {
	per10k int
	kinds  []string
	make   func(r *rand.Rand) string
}{
	{700, []string{"drop-reply"}, fixed("drop-reply")},
	{600, []string{"delay"}, func(r *rand.Rand) string { return fmt.Sprintf("delay=%dms", 1+r.IntN(50)) }},
	{200, []string{"slow"}, fixed("slow")},
	// Longer than the client's default timeout: the client retries while
	// the owner is still in flight.
	{300, []string{"delay"}, func(r *rand.Rand) string { return fmt.Sprintf("delay=%dms", 300+r.IntN(400)) }},
	{200, []string{"stall"}, func(r *rand.Rand) string { return fmt.Sprintf("stall=%dms", 5+r.IntN(100)) }},
	{150, []string{"delay", "drop-reply"}, func(r *rand.Rand) string { return fmt.Sprintf("delay=%dms,drop-reply", 1+r.IntN(50)) }},
	{40, []string{"crash-before-effect"}, fixed("crash-before-effect")},
	{40, []string{"crash-after-effect"}, fixed("crash-after-effect")},
	{30, []string{"stall", "crash-after-effect"}, func(r *rand.Rand) string { return fmt.Sprintf("stall=%dms,crash-after-effect", 20+r.IntN(200)) }},
	{40, []string{"crash-after-record"}, fixed("crash-after-record")},
	{150, []string{"fail-effect"}, fixed("fail-effect")},
	{100, []string{"fail-after-effect"}, fixed("fail-after-effect")},
	{200, []string{"give-up"}, func(r *rand.Rand) string { return fmt.Sprintf("give-up=%dms", 5+r.IntN(150)) }},
}

func fixed(f string) func(*rand.Rand) string { return func(*rand.Rand) string { return f } }

// Backoff before chaos-phase attempt n+1 (n made): r·min(backoffCap,
// backoffBase·2^n), r uniform in [0, 1) (full jitter).
const (
	backoffBase = 5 * time.Millisecond
	backoffCap  = 200 * time.Millisecond
)

// QuietBackoff is the wait between two quiet-phase attempts of one intent.
const QuietBackoff = 20 * time.Millisecond

// MaxKills bounds the nemesis's plan whatever the duration.
const MaxKills = 10000

const (
	streamAttempt uint64 = 1 << 62
	streamKill    uint64 = 2 << 62
)

func (s Schedule) rng(stream, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(s.Seed, stream|a<<24|b&(1<<24-1)))
}

// Attempt returns the decision for chaos-phase attempt n (0-based) of
// intent i: the replica (drawn first), the fault (a draw in [0, 10000)
// against the table, then its arguments, drawn even where the schedule
// does not place its kinds, so that the rest of the decision is the same
// on every fault set), then for n > 0 the backoff.
func (s Schedule) Attempt(i, n int) Decision {
	r := s.rng(streamAttempt, uint64(i), uint64(n))
	d := Decision{Replica: r.IntN(max(s.Replicas, 1))}
	x := r.IntN(10000)
	for _, f := range faultMix {
		if x < f.per10k {
			if v := f.make(r); s.places(f.kinds) {
				d.Fault = v
			}
			break
		}
		x -= f.per10k
	}
	if n > 0 {
		ceil := backoffCap
		if n < 10 {
			ceil = min(backoffCap, backoffBase<<n)
		}
		d.Backoff = time.Duration(r.Float64() * float64(ceil))
	}
	return d
}

// places reports whether s places every one of kinds.
func (s Schedule) places(kinds []string) bool {
	return !slices.ContainsFunc(kinds, func(k string) bool { return !slices.Contains(s.Faults, k) })
}

// Quiet returns the decision for quiet-phase attempt n (counted over both
// phases) of intent i: no fault, the replicas in turn.
func (s Schedule) Quiet(i, n int) Decision {
	return Decision{Replica: (i + n) % max(s.Replicas, 1), Backoff: QuietBackoff}
}

// A Kill is one of the nemesis's planned kills: SIGKILL replica Replica At
// after the chaos phase began, and restart it on the same state Down after
// it exited.
type Kill struct {
	At      time.Duration
	Replica int
	Down    time.Duration
}

// Kills returns the nemesis's plan for a chaos phase of length d: kill k
// at the sum of k+1 gaps, each every/2 plus a draw in [0, every), while
// before d; its replica a draw among the replicas; down 20 ms plus a draw
// in [0, 180 ms). None when every is not positive; at most MaxKills.
func (s Schedule) Kills(d, every time.Duration) []Kill {
	var out []Kill
	if every <= 0 {
		return out
	}
	var at time.Duration
	for k := range MaxKills {
		r := s.rng(streamKill, uint64(k), 0)
		at += every/2 + time.Duration(r.Int64N(int64(every)))
		if at >= d {
			break
		}
		out = append(out, Kill{At: at, Replica: r.IntN(max(s.Replicas, 1)),
			Down: 20*time.Millisecond + time.Duration(r.Int64N(int64(180*time.Millisecond)))})
	}
	return out
}

// Key is the idempotency key of intent n.
func Key(n int64) string { return "chaos-" + strconv.FormatInt(n, 10) }

// Body is the request body of intent n of a run with this seed: its own,
// so that the journal names the intent by the body's SHA-256.
func Body(seed uint64, n int64) string { return fmt.Sprintf("chaos seed %d intent %d", seed, n) }

// Why a planned kill did not land (a kill_skipped event's error).
const (
	SkipDown     = "the replica was down"
	SkipLastUp   = "the replica was the last one up"
	SkipCrashed  = "the replica's process ended first (a crash fault)"
	SkipPhaseEnd = "the chaos phase ended first"
)

// SkipReasons are every reason a planned kill may not land.
var SkipReasons = []string{SkipDown, SkipLastUp, SkipCrashed, SkipPhaseEnd}

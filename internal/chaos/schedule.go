package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/target"
)

// A Schedule is the seeded part of a run: for every attempt of every intent,
// the replica it goes to, the fault it carries and the backoff before it;
// and the nemesis's kills. Every decision comes from a generator derived
// from (seed, intent, attempt) or (seed, kill number) alone, so it does not
// depend on which client runs an intent, when, or what the servers did.
type Schedule struct {
	Seed     uint64
	Replicas int // replicas to choose among, at least 1
	// Faults are the fault kinds the run can place (StoreFaults on the lab's
	// own server, TargetFaults of a target); an attempt whose drawn fault
	// holds another kind carries none. Nil is StoreFaults.
	Faults []string
}

// A Decision is what the schedule says about one attempt.
type Decision struct {
	Replica int           // the replica the attempt goes to
	Fault   string        // the X-Lab-Fault value; "" sends none
	Backoff time.Duration // the wait before this attempt (0 before the first)
}

// faultMix is the chaos phase's fault table: the share of attempts (in
// parts per 10,000) that carry each fault, the rest carry none, and the
// kinds each value holds. Arguments of delay, stall and give-up are drawn
// per attempt. The crash faults are rare on purpose: each stops a replica,
// and a run spends its time restarting servers if they are common. The
// last three rows came later (the failing effect; give-up, which only a
// target takes): they come after the others, so that every attempt that
// drew one of the first rows draws it still. A row whose kinds the
// schedule cannot place draws its value all the same: the replica and the
// backoff of an attempt are the same whatever the fault set.
var faultMix = []struct {
	per10k int
	kinds  []string
	make   func(r *rand.Rand) string
}{
	{700, kinds(protocol.FaultDropReply), fixedFault(protocol.FaultDropReply)},
	{600, kinds(protocol.FaultDelay), func(r *rand.Rand) string { return fmt.Sprintf("%s=%dms", protocol.FaultDelay, 1+r.IntN(50)) }},
	{200, kinds(protocol.FaultSlow), fixedFault(protocol.FaultSlow)},
	// Longer than the client's default timeout: the client retries while
	// the owner is still in flight, so the retry waits for it (and may
	// get 409) or, on another replica, meets the owner's claim in a
	// shared store.
	{300, kinds(protocol.FaultDelay), func(r *rand.Rand) string { return fmt.Sprintf("%s=%dms", protocol.FaultDelay, 300+r.IntN(400)) }},
	{200, kinds(protocol.FaultStall), func(r *rand.Rand) string { return fmt.Sprintf("%s=%dms", protocol.FaultStall, 5+r.IntN(100)) }},
	{150, kinds(protocol.FaultDelay, protocol.FaultDropReply), func(r *rand.Rand) string {
		return fmt.Sprintf("%s=%dms,%s", protocol.FaultDelay, 1+r.IntN(50), protocol.FaultDropReply)
	}},
	{40, kinds(protocol.FaultCrashBeforeEffect), fixedFault(protocol.FaultCrashBeforeEffect)},
	{40, kinds(protocol.FaultCrashAfterEffect), fixedFault(protocol.FaultCrashAfterEffect)},
	{30, kinds(protocol.FaultStall, protocol.FaultCrashAfterEffect), func(r *rand.Rand) string {
		return fmt.Sprintf("%s=%dms,%s", protocol.FaultStall, 20+r.IntN(200), protocol.FaultCrashAfterEffect)
	}},
	{40, kinds(protocol.FaultCrashAfterRecord), fixedFault(protocol.FaultCrashAfterRecord)},
	// The effect fails (nothing applied), or the handler fails once it is
	// done: a 500 either way.
	{150, kinds(protocol.FaultFailEffect), fixedFault(protocol.FaultFailEffect)},
	{100, kinds(protocol.FaultFailAfterEffect), fixedFault(protocol.FaultFailAfterEffect)},
	// Targets only: the proxy gives up on the request in flight.
	{200, []string{target.FaultGiveUp}, func(r *rand.Rand) string { return fmt.Sprintf("%s=%dms", target.FaultGiveUp, 5+r.IntN(150)) }},
}

func kinds(fs ...protocol.Fault) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return out
}

func fixedFault(f protocol.Fault) func(*rand.Rand) string {
	return func(*rand.Rand) string { return string(f) }
}

// FaultKinds lists every fault kind the schedule draws, in the order
// chaos.json counts them.
var FaultKinds = []string{
	string(protocol.FaultDelay), string(protocol.FaultSlow), string(protocol.FaultCrashBeforeEffect), string(protocol.FaultStall),
	string(protocol.FaultCrashAfterEffect), string(protocol.FaultCrashAfterRecord), string(protocol.FaultDropReply),
	string(protocol.FaultFailEffect), string(protocol.FaultFailAfterEffect), target.FaultGiveUp,
}

// StoreFaults are the kinds the lab's own server takes (effectserver
// -faults), in FaultKinds order: all but give-up, which the fault proxy in
// front of a target places.
var StoreFaults = FaultKinds[:9]

// allowed reports whether every kind of a mix row is one s can place.
func (s Schedule) allowed(ks []string) bool {
	faults := s.Faults
	if faults == nil {
		faults = StoreFaults
	}
	for _, k := range ks {
		if !slices.Contains(faults, k) {
			return false
		}
	}
	return true
}

// Backoff bounds: the wait before attempt n+1 (n attempts made) is
// r·min(backoffCap, backoffBase·2^n) with r uniform in [0, 1) (full jitter).
const (
	backoffBase = 5 * time.Millisecond
	backoffCap  = 200 * time.Millisecond
)

// stream tags keep the generators of attempts and kills apart.
const (
	streamAttempt uint64 = 1 << 62
	streamKill    uint64 = 2 << 62
)

func (s Schedule) rng(stream, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(s.Seed, stream|a<<24|b&(1<<24-1)))
}

// Attempt returns the decision for attempt n (0-based) of intent i in the
// chaos phase. It is a pure function of (s, i, n).
func (s Schedule) Attempt(i, n int) Decision {
	r := s.rng(streamAttempt, uint64(i), uint64(n))
	d := Decision{Replica: r.IntN(max(s.Replicas, 1))}
	x := r.IntN(10000)
	for _, f := range faultMix {
		if x < f.per10k {
			// The value is drawn even where it is not placed, so that
			// the rest of the decision is the same on every fault set.
			if v := f.make(r); s.allowed(f.kinds) {
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

// Quiet returns the decision for attempt n of intent i in the quiet phase:
// no fault, the replicas in turn, a short fixed backoff. It is pure too.
func (s Schedule) Quiet(i, n int) Decision {
	return Decision{Replica: (i + n) % max(s.Replicas, 1), Backoff: quietBackoff}
}

// quietBackoff is the wait between quiet-phase attempts of one intent.
const quietBackoff = 20 * time.Millisecond

// A Kill is one of the nemesis's planned kills: SIGKILL replica Replica At
// after the run's start, and restart it on the same state Down later.
type Kill struct {
	At      time.Duration
	Replica int
	Down    time.Duration
}

// Kills returns the nemesis's plan for a chaos phase of length d: kills
// spaced uniformly in [every/2, 3·every/2), each at a replica drawn
// uniformly, each down for 20 to 200 ms. It is a pure function of
// (s, d, every); at most maxKills kills.
func (s Schedule) Kills(d, every time.Duration) []Kill {
	var out []Kill
	if every <= 0 {
		return out
	}
	var at time.Duration
	for k := 0; k < maxKills; k++ {
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

// maxKills bounds the nemesis's plan whatever the duration.
const maxKills = 10000

// faultKinds splits a fault value into the names of its faults, without
// arguments: "delay=5ms,drop-reply" is delay and drop-reply.
func faultKinds(v string) []string {
	if v == "" {
		return nil
	}
	var out []string
	for part := range strings.SplitSeq(v, ",") {
		name, _, _ := strings.Cut(part, "=")
		out = append(out, name)
	}
	return out
}

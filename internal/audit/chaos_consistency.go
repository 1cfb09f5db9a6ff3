package audit

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
)

// The chaos history's consistency checks: what a history must say beside
// the checker's rules (chaos.go), because the lab's design says it. A
// history invented to be consistent with all of them still passes (the
// journal and the attempts are both the forger's): these checks close the
// cheap forgeries, and audit -reproduce re-observes the rest.
//
// Per attempt, as it is read: its key and body are its intent's
// ("chaos-N", the SHA-256 of "chaos seed S intent N"); an intent's attempts
// are numbered 0, 1, ... in order, one at a time (each begins after the one
// before ended), the chaos phase's before the quiet phase's; each chaos
// attempt goes to the replica with the fault the seeded schedule names
// (chaos_schedule.go) and begins no sooner than its backoff after the
// attempt before it; a quiet attempt goes to replica (N + attempt) mod
// replicas with no fault, 20 ms after the quiet attempt before it.
//
// Over the whole history: intents are numbered 0..N-1 (unless a cap
// stopped the clients); no intent makes more attempts than max_attempts
// and quiet_attempts allow; the durable and postgres stores have exactly
// one place, holding every replica, the volatile store one place per
// replica; an intent has no more effects at a place than it made attempts
// there that may have applied it (no reply, or a 200 not marked
// replayed); a reply marked replayed follows an earlier attempt of its
// intent at the same place that got no reply (the one whose result it
// replays), and its value is below that of every reply not replayed at
// that place that began after it ended (its effect came first); every
// replica starts, and each start, kill, exit and stop comes in its order
// (a kill is followed by the replica's exit, every exit by a restart, the
// run ends with each replica's stop); every kill is one the nemesis's
// seeded plan holds, for that replica, no sooner than planned; a planned
// kill that did not happen had a reason (its replica down, or the last one
// up, while the nemesis would have acted, or the chaos phase ending); and a
// killed replica comes back no sooner than its planned down time.

// maxPlaced is how many replicas (and places) the per-intent checks
// follow: the lab runs at most 4 replicas (chaos.MaxReplicas; the
// parameters' check pins replicas to 1..4). A history of more fails that
// check; its replicas and places beyond 4 are not followed here.
const maxPlaced = 4

// A chaosIssue is one consistency check that failed.
type chaosIssue struct {
	rule   string // what kind of check: intent, attempt_order, schedule, attempts, places, effects, replayed, events, kills
	intent int64  // -1: not about one intent
	text   string
}

// chaosIssueRules orders the issues' kinds in a report.
var chaosIssueRules = []string{"intent", "attempt_order", "schedule", "attempts", "places", "effects", "replayed", "events", "kills"}

// maxIssues bounds the issues kept of one kind; the rest are counted.
const maxIssues = 100

func (h *chaosHistory) issue(rule string, intent int64, format string, args ...any) {
	h.issues = append(h.issues, chaosIssue{rule, intent, fmt.Sprintf(format, args...)})
}

// chaosEvent is one server event line.
type chaosEvent struct {
	kind          string
	replica, code int64
	at            int64
}

// chaosLine is what attemptInOrder needs of one attempt line.
type chaosLine struct {
	replica, attempt int64
	chaos            bool // the chaos phase, else the quiet one
	start, end       int64
	fault            []byte
	typ              string
	replayed         int8 // -1 null, 0 false, 1 true
}

// chaosIntentBody is the body the lab sends for intent n of a run with this
// seed, as its key is "chaos-N".
func chaosIntentBody(seed uint64, n int64) string {
	return fmt.Sprintf("chaos seed %d intent %d", seed, n)
}

// firstAttempt checks the key and body of intent n's first attempt (line
// no): the lab's intent n.
func (h *chaosHistory) firstAttempt(no int, n int64, key []byte, sum [32]byte) {
	want := sha256.Sum256([]byte(chaosIntentBody(h.seed, n)))
	if wantKey := "chaos-" + strconv.FormatInt(n, 10); string(key) != wantKey || sum != want {
		h.issue("intent", n, "line %d: intent %d sends key %q and a body of SHA-256 %s; the lab's intent %d of seed %d is key %q, body %q (SHA-256 %s)",
			no, n, key, hex.EncodeToString(sum[:]), n, h.seed, wantKey, chaosIntentBody(h.seed, n), hex.EncodeToString(want[:]))
	}
}

// attemptInOrder checks one attempt (line no) of intent n against the
// intent's attempts before it and the schedule, and adds it to the
// intent's state. For a reply marked replayed it returns the replicas
// (bits) of the intent's earlier attempts that may have applied it.
func (h *chaosHistory) attemptInOrder(no int, n int64, in *chaosIntent, a chaosLine) uint8 {
	if h.firstAttemptStart < 0 {
		h.firstAttemptStart = a.start
	}
	switch {
	case a.attempt != int64(in.next):
		h.issue("attempt_order", n, "line %d: intent %d's attempt %d follows its attempt %d: an intent's attempts are numbered 0, 1, ... in order", no, n, a.attempt, in.next-1)
	case in.lastPhase != 0 && a.start < in.lastEnd:
		h.issue("attempt_order", n, "line %d: intent %d's attempt %d began at %d µs, before its attempt %d ended (%d µs): one client makes an intent's attempts one at a time",
			no, n, a.attempt, a.start, a.attempt-1, in.lastEnd)
	case in.lastPhase == 2 && a.chaos:
		h.issue("attempt_order", n, "line %d: intent %d's attempt %d is a chaos attempt after a quiet one", no, n, a.attempt)
	}
	inOrder := a.attempt == int64(in.next)
	if a.chaos {
		in.chaosN = min(in.chaosN+1, 1<<16-1)
		d := h.sched.attempt(n, a.attempt)
		if a.replica != int64(d.replica) || string(a.fault) != d.fault {
			h.issue("schedule", n, "line %d: intent %d's attempt %d went to replica %d with fault %q; the schedule of seed %d says replica %d, fault %q",
				no, n, a.attempt, a.replica, a.fault, h.seed, d.replica, d.fault)
		} else if inOrder && in.lastPhase == 1 && a.start < in.lastEnd+d.backoffUS {
			h.issue("schedule", n, "line %d: intent %d's attempt %d began %d µs after its attempt before ended; the schedule's backoff before it is %d µs",
				no, n, a.attempt, a.start-in.lastEnd, d.backoffUS)
		}
	} else {
		in.quietN = min(in.quietN+1, 1<<16-1)
		d := h.sched.quiet(n, a.attempt)
		if a.replica != int64(d.replica) || len(a.fault) != 0 {
			h.issue("schedule", n, "line %d: intent %d's quiet attempt %d went to replica %d with fault %q; the quiet phase sends it to replica %d ((intent + attempt) mod %d) with none",
				no, n, a.attempt, a.replica, a.fault, d.replica, h.replicas)
		} else if inOrder && in.lastPhase == 2 && a.start < in.lastEnd+quietBackoffUS {
			h.issue("schedule", n, "line %d: intent %d's quiet attempt %d began %d µs after its attempt before ended; the quiet phase waits %d µs",
				no, n, a.attempt, a.start-in.lastEnd, quietBackoffUS)
		}
	}
	var earlier uint8
	replayed := a.typ == "ok" && a.replayed == 1
	if replayed {
		for r, k := range in.apply {
			if k > 0 {
				earlier |= 1 << r
			}
		}
	}
	// What may have applied the intent: an attempt without a reply, or a
	// 200 not marked replayed. (A reply other than 200 took no effect, nor
	// did a replayed one.) A 200 ends the intent's attempts, so the
	// earlier attempts a replay may follow are the ones without a reply.
	if (a.typ == "info" || a.typ == "ok" && !replayed) && a.replica < maxPlaced && in.apply[a.replica] < 1<<16-1 {
		in.apply[a.replica]++
	}
	in.next, in.lastEnd = int32(max(int64(in.next), a.attempt+1)), a.end
	in.lastPhase = 2
	if a.chaos {
		in.lastPhase = 1
	}
	return earlier
}

// chaosRunParams are what the history's end checks need of chaos.json.
type chaosRunParams struct {
	durationMS, killEveryMS     int64
	maxAttempts, quietAttempts  int64
	cappedIntents, cappedAttmpt bool
}

// killSlackUS bounds how late the nemesis acts on a planned kill while it
// is not busy restarting a replica or killing one: its loop ticks every
// 5 ms; 50 ms leaves room for a loaded machine. Measured on the 32 kills
// of the fixture's, the committed and a fresh run's histories (12 of them,
// on a 2-core machine with a load average of 7): the latest came 37 ms
// after its planned time, most within 5 ms. reapUS bounds how late a
// replica that crashed is seen to have (the next tick's reap).
const (
	killSlackUS = 50_000
	reapUS      = 20_000
	// restartAfterUS is the supervisor's wait before it restarts a
	// replica that crashed: it is busy restarting no sooner.
	restartAfterUS = 10_000
)

// checkConsistency runs the end checks on a whole history of store.
func (h *chaosHistory) checkConsistency(store string, p chaosRunParams) {
	h.checkIntentsAndAttempts(p)
	placeOf := h.checkPlaces(store)
	h.checkEffectsAndReplays(placeOf)
	h.checkEventsAndKills(p)
}

func (h *chaosHistory) checkIntentsAndAttempts(p chaosRunParams) {
	n := int64(h.intents.n)
	var lo, hi int64 = maxInt, -1
	for i := range h.intents.n {
		in := h.intents.at(i)
		lo, hi = min(lo, in.number), max(hi, in.number)
		if int64(in.chaosN) > p.maxAttempts {
			h.issue("attempts", in.number, "intent %d made %d chaos-phase attempts; parameters.max_attempts is %d", in.number, in.chaosN, p.maxAttempts)
		}
		if int64(in.quietN) > p.quietAttempts {
			h.issue("attempts", in.number, "intent %d made %d quiet-phase attempts; parameters.quiet_attempts is %d", in.number, in.quietN, p.quietAttempts)
		}
	}
	if n > 0 && (lo != 0 || hi != n-1) && !p.cappedIntents && !p.cappedAttmpt {
		h.issue("attempts", -1, "%d intents numbered %d..%d: every intent a client takes (0, 1, ...) makes an attempt, and capped says no cap stopped the clients", n, lo, hi)
	}
}

// checkPlaces checks where the store keeps its state and returns each
// replica's place (the first that lists it).
func (h *chaosHistory) checkPlaces(store string) map[int64]int64 {
	placeOf := map[int64]int64{}
	for _, pl := range h.places {
		for _, r := range pl.replicas {
			if _, ok := placeOf[r]; !ok {
				placeOf[r] = pl.place
			}
		}
	}
	switch store {
	case "durable", "postgres":
		if len(h.places) != 1 || len(h.places[0].replicas) != h.replicas {
			h.issue("places", -1, "%d places (%s); the %s store keeps one state every replica shares: one place holding replicas 0..%d",
				len(h.places), placesText(h.places), store, h.replicas-1)
		}
	case "volatile":
		if len(h.places) != h.replicas || slices.ContainsFunc(h.places, func(p chaosPlace) bool { return len(p.replicas) != 1 }) {
			h.issue("places", -1, "%d places (%s); the volatile store keeps each replica's state apart: %d places of one replica each",
				len(h.places), placesText(h.places), h.replicas)
		}
	}
	return placeOf
}

func placesText(ps []chaosPlace) string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("place %d: replicas %v", p.place, p.replicas))
	}
	if len(out) == 0 {
		return "none"
	}
	return fmt.Sprint(out)
}

// checkEffectsAndReplays checks each intent's effects per place against
// its attempts there, and each reply marked replayed.
func (h *chaosHistory) checkEffectsAndReplays(placeOf map[int64]int64) {
	for i := range h.intents.n {
		in := h.intents.at(i)
		var could [maxPlaced]int64
		for r, k := range in.apply {
			if pl, ok := placeOf[int64(r)]; ok && pl < maxPlaced {
				could[pl] += int64(k)
			}
		}
		for pl, got := range in.effectsAt {
			if int64(got) > could[pl] {
				h.issue("effects", in.number, "intent %d has %d effects at place %d, but made %d attempts there that may have applied it (no reply, or a 200 not replayed)",
					in.number, got, pl, could[pl])
			}
		}
	}

	type ack struct {
		*chaosAck
		v int64
	}
	fresh := map[int64][]ack{} // place -> 200s not replayed, by start
	var replays []ack
	for k := range h.acks.n {
		a := h.acks.at(k)
		v, err := strconv.ParseInt(string(h.text.bytes(a.value)), 10, 64)
		pl, ok := placeOf[int64(a.replica)]
		if err != nil || !ok {
			continue // value_mismatch or bad_journal (chaos.go)
		}
		switch a.replayed {
		case 1:
			replays = append(replays, ack{a, v})
		case 0:
			fresh[pl] = append(fresh[pl], ack{a, v})
		}
	}
	// suffixMin[pl][i]: the index of the smallest value among fresh[pl][i:].
	suffixMin := map[int64][]int{}
	for pl, acks := range fresh {
		slices.SortStableFunc(acks, func(x, y ack) int { return cmp.Compare(x.start, y.start) })
		m := make([]int, len(acks)+1)
		m[len(acks)] = -1
		for i := len(acks) - 1; i >= 0; i-- {
			m[i] = i
			if j := m[i+1]; j >= 0 && acks[j].v < acks[i].v {
				m[i] = j
			}
		}
		suffixMin[pl] = m
	}
	for _, r := range replays {
		pl := placeOf[int64(r.replica)]
		number := h.intents.at(r.intent).number
		var at []int64
		before := false
		for x := range maxPlaced {
			if r.earlier&(1<<x) != 0 {
				at = append(at, int64(x))
				if p, ok := placeOf[int64(x)]; ok && p == pl {
					before = true
				}
			}
		}
		if !before {
			h.issue("replayed", number, "intent %d's attempt %d on replica %d got 200 %q marked replayed, but none of its earlier attempts at place %d went without a reply: there is no earlier result to replay (its earlier attempts without a reply went to replicas %v)",
				number, r.attempt, r.replica, h.text.bytes(r.value), pl, at)
			continue
		}
		acks := fresh[pl]
		i, _ := slices.BinarySearchFunc(acks, r.end+1, func(x ack, t int64) int { return cmp.Compare(x.start, t) })
		if j := suffixMin[pl][i]; j >= 0 && acks[j].v <= r.v {
			b := acks[j]
			h.issue("replayed", number, "intent %d's attempt %d got value %d marked replayed, ending at %d µs; intent %d's attempt %d began after it (%d µs) at place %d and got value %d, not replayed: a replayed value comes from an effect applied before, so it must be the smaller",
				number, r.attempt, r.v, r.end, h.intents.at(b.intent).number, b.attempt, b.start, pl, b.v)
		}
	}
}

// checkEventsAndKills checks each replica's server events in their order
// and the kills against the nemesis's seeded plan.
func (h *chaosHistory) checkEventsAndKills(p chaosRunParams) {
	const (
		down = iota
		up
		killed
		stopped
	)
	state := make([]int, h.replicas)
	started := make([]bool, h.replicas)
	// up intervals, as the nemesis saw them: from a start to the exit.
	type interval struct{ from, to int64 }
	ups := make([][]interval, h.replicas)
	upSince := make([]int64, h.replicas)
	var t0lo int64 // the chaos phase began after every replica's first start
	type kill struct {
		replica, at, exitAt, restartAt int64
	}
	var kills []kill
	lastKill := make([]int, h.replicas) // index in kills of the replica's last kill, -1 none
	for i := range lastKill {
		lastKill[i] = -1
	}
	for _, e := range h.serverEvents {
		r := e.replica
		bad := func(format string, args ...any) {
			h.issue("events", -1, "replica %d: %s at %d µs: %s", r, e.kind, e.at, fmt.Sprintf(format, args...))
		}
		switch e.kind {
		case "start":
			if state[r] != down {
				bad("it was not down")
				continue
			}
			if !started[r] {
				started[r] = true
				t0lo = max(t0lo, e.at)
			}
			if k := lastKill[r]; k >= 0 && kills[k].restartAt < 0 {
				kills[k].restartAt = e.at
			}
			state[r], upSince[r] = up, e.at
		case "start_failed":
			if state[r] != down {
				bad("it was not down")
			}
		case "kill":
			if state[r] != up {
				bad("it was not up")
				continue
			}
			state[r] = killed
			lastKill[r] = len(kills)
			kills = append(kills, kill{r, e.at, -1, -1})
		case "exit":
			if state[r] != up && state[r] != killed {
				bad("it was not running")
				continue
			}
			if state[r] == killed {
				kills[lastKill[r]].exitAt = e.at
			}
			ups[r] = append(ups[r], interval{upSince[r], e.at})
			state[r] = down
		case "stop":
			if state[r] != up {
				bad("it was not up (a stop ends the run of a replica that is up)")
				continue
			}
			ups[r] = append(ups[r], interval{upSince[r], e.at})
			state[r] = stopped
		}
	}
	for r, s := range state {
		switch {
		case !started[r]:
			h.issue("events", -1, "replica %d never started", r)
		case s == killed:
			h.issue("events", -1, "replica %d: killed, and no exit follows", r)
		case s != stopped:
			h.issue("events", -1, "replica %d: no final stop (every replica is up at the end, and stopped)", r)
		}
	}
	t0hi := h.firstAttemptStart // the clients begin after the chaos phase does
	if t0hi < 0 {
		t0hi = t0lo
	}
	plan := h.sched.kills(p.durationMS, p.killEveryMS)
	end := t0lo + p.durationMS*1000 // the chaos phase ended no sooner
	upAt := func(r int, lo, hi int64, all bool) bool {
		// all: r is up for the whole of [lo, hi]; else: at some instant.
		for _, iv := range ups[r] {
			if all && iv.from <= lo && hi < iv.to {
				return true
			}
			if !all && iv.from <= hi && lo < iv.to {
				return true
			}
		}
		return false
	}
	exitIn := func(r int, lo, hi int64) bool {
		return slices.ContainsFunc(ups[r], func(iv interval) bool { return lo <= iv.to && iv.to <= hi })
	}
	// The supervisor is busy, and acts on no planned kill, while it
	// restarts a replica (from restartAfterUS after its exit, at the
	// soonest, to its start) or kills one (the kill to the exit).
	type span struct{ from, to int64 }
	var busy []span
	lastExit := make([]int64, h.replicas)
	for i := range lastExit {
		lastExit[i] = -1
	}
	for _, e := range h.serverEvents {
		switch e.kind {
		case "exit":
			lastExit[e.replica] = e.at
		case "start":
			if x := lastExit[e.replica]; x >= 0 && x+restartAfterUS < e.at {
				busy = append(busy, span{x + restartAfterUS, e.at})
			}
			lastExit[e.replica] = -1
		}
	}
	for _, k := range kills {
		if k.exitAt >= 0 {
			busy = append(busy, span{k.at, k.exitAt})
		}
	}
	// freeAt is the first moment from t on that the supervisor is free.
	freeAt := func(t int64) int64 {
		for moved := true; moved; {
			moved = false
			for _, b := range busy {
				if b.from <= t && t < b.to {
					t, moved = b.to, true
				}
			}
		}
		return t
	}
	// excused says why planned kill q may not have happened, or "": the
	// nemesis acted on it at a tick between its due time and the first
	// moment the supervisor was free after it (plus killSlackUS), and no
	// later than the next kill it made.
	excused := func(q chaosKill, next int64) string {
		lo := t0lo + q.atUS
		hi := min(next, freeAt(t0hi+q.atUS)+killSlackUS)
		switch {
		case hi >= end:
			return "the chaos phase may have ended first"
		case !upAt(q.replica, lo, hi, true) || exitIn(q.replica, lo, hi+reapUS):
			return "its replica was down"
		case h.replicas > 1:
			for t := range h.replicas {
				if t != q.replica && upAt(t, lo, hi, true) {
					return "" // another replica was up all along: the nemesis would have killed it
				}
			}
			return "its replica was the last one up"
		}
		return ""
	}
	// Each kill is matched to a planned kill of its replica due by then,
	// after the one matched before. The nemesis works through the plan
	// in order, skipping some, so of several such the latest whose
	// skipped predecessors are all excused is taken (the kill came as
	// soon after its planned time as the others allow); if none is,
	// the earliest, and the unexcused ones are reported.
	j := 0
	for _, k := range kills {
		var cands []int
		for x := j; x < len(plan); x++ {
			if int64(plan[x].replica) == k.replica && t0lo+plan[x].atUS <= k.at {
				cands = append(cands, x)
			}
		}
		if len(cands) == 0 {
			h.issue("kills", -1, "replica %d killed at %d µs: no kill left in the nemesis's plan for seed %d (%d planned, every %d ms over %d ms) is of that replica and due by then",
				k.replica, k.at, h.seed, len(plan), p.killEveryMS, p.durationMS)
			continue
		}
		m := cands[0]
		for _, x := range slices.Backward(cands) {
			if !slices.ContainsFunc(plan[j:x], func(q chaosKill) bool { return excused(q, k.at) == "" }) {
				m = x
				break
			}
		}
		for x := j; x < m; x++ {
			if excused(plan[x], k.at) == "" {
				h.issue("kills", -1, "the nemesis's planned kill %d (replica %d at %d ms into the chaos phase) did not happen, and nothing excuses it: every replica was up while the nemesis would have acted",
					x, plan[x].replica, plan[x].atUS/1000)
			}
		}
		// The down time: the shortest of the kills it may have been.
		downUS := plan[m].downUS
		for _, x := range cands {
			if x <= m {
				downUS = min(downUS, plan[x].downUS)
			}
		}
		j = m + 1
		if k.restartAt >= 0 && k.exitAt >= 0 && k.restartAt < end && k.restartAt < k.exitAt+downUS {
			h.issue("kills", -1, "replica %d killed at %d µs (planned kill %d) restarted %d µs after its exit; the plan keeps it down %d µs",
				k.replica, k.at, m, k.restartAt-k.exitAt, downUS)
		}
	}
	for x := j; x < len(plan); x++ {
		if why := excused(plan[x], maxInt); why == "" {
			h.issue("kills", -1, "the nemesis's planned kill %d (replica %d at %d ms into the chaos phase) did not happen, and nothing excuses it: every replica was up while the nemesis would have acted",
				x, plan[x].replica, plan[x].atUS/1000)
		}
	}
}

package audit

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"

	"idemlab/internal/audit/chaosplan"
)

// The chaos history's consistency checks: what a history must say beside
// the checker's rules (chaoshistory.go), because the lab's design says it
// (internal/chaos). A history invented to be consistent with all of them
// still passes (the journal and the attempts are both the forger's): these
// checks close the cheap forgeries, and audit -reproduce re-observes the
// rest. Per attempt, as it is read: it is its intent's (key and body), in
// order, and where and when the plan (chaosplan) sends it. Over the whole
// history: the intents' numbering and attempt counts, the places of the
// store or the target, each intent's effects against its attempts and
// each replayed reply (on the lab's stores only: on a target they are the
// target's own behaviour, which the checker judges), each replica's
// events in order, and the nemesis's plan against its kill and
// kill_skipped events.

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

func (h *chaosHistory) issue(rule string, intent int64, format string, args ...any) {
	h.issues = append(h.issues, chaosIssue{rule, intent, fmt.Sprintf(format, args...)})
}

// chaosEvent is one server event line (line no).
type chaosEvent struct {
	kind          string
	replica, code int64
	at, planned   int64 // planned: the kill's number in the plan (kill, kill_skipped), else -1
	reason        int8  // kill_skipped: its reason's index in chaosplan.SkipReasons (-1: none of them)
	no            int
}

// sigkillExit is the exit code of a process SIGKILL ended (128+9).
const sigkillExit = 137

// chaosLine is one attempt line as read (its texts valid until the next
// line is read).
type chaosLine struct {
	intent, replica, attempt int64
	key                      []byte
	sum                      [32]byte // its body's SHA-256
	chaos                    bool     // the chaos phase, else the quiet one
	start, end               int64
	fault, outcome           []byte
	typ                      string
	status                   int64
	value, errText           []byte
	replayed                 int8 // -1 null, 0 false, 1 true
}

// firstAttempt checks the key and body of intent n's first attempt (line
// no): the lab's intent n.
func (h *chaosHistory) firstAttempt(no int, n int64, key []byte, sum [32]byte) {
	want := sha256.Sum256([]byte(chaosplan.Body(h.seed, n)))
	if wantKey := chaosplan.Key(n); string(key) != wantKey || sum != want {
		h.issue("intent", n, "line %d: intent %d sends key %q and a body of SHA-256 %s; the lab's intent %d of seed %d is key %q, body %q (SHA-256 %s)",
			no, n, key, hex.EncodeToString(sum[:]), n, h.seed, wantKey, chaosplan.Body(h.seed, n), hex.EncodeToString(want[:]))
	}
}

// attemptInOrder checks one attempt (line no) of intent n against the
// intent's attempts before it and the plan, and adds it to the intent's
// state: an intent's attempts are numbered 0, 1, ... in order, one at a
// time, the chaos phase's (inside it) before the quiet phase's (after it
// began); a chaos attempt goes to the replica with the fault the plan
// names, no sooner than its backoff after the attempt before; a quiet one
// to replica (N + attempt) mod replicas with no fault, 20 ms after the one
// before. For a reply marked replayed it returns the replicas (bits) of
// the intent's earlier attempts that may have applied it.
func (h *chaosHistory) attemptInOrder(no int, n int64, in *chaosIntent, a chaosLine) uint8 {
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
	switch {
	case a.chaos && (a.start < h.chaosStartUS || a.start > h.quietStartUS):
		h.issue("schedule", n, "line %d: intent %d's chaos attempt %d began at %d µs, outside the chaos phase (%d to %d µs)", no, n, a.attempt, a.start, h.chaosStartUS, h.quietStartUS)
	case !a.chaos && a.start < h.quietStartUS:
		h.issue("schedule", n, "line %d: intent %d's quiet attempt %d began at %d µs, before the quiet phase (%d µs)", no, n, a.attempt, a.start, h.quietStartUS)
	}
	if a.chaos {
		in.chaosN = min(in.chaosN+1, 1<<16-1)
		d := h.sched.Attempt(int(n), int(a.attempt))
		if a.replica != int64(d.Replica) || string(a.fault) != d.Fault {
			h.issue("schedule", n, "line %d: intent %d's attempt %d went to replica %d with fault %q; the schedule of seed %d (%d replicas, fault kinds %s) says replica %d, fault %q",
				no, n, a.attempt, a.replica, a.fault, h.seed, h.replicas, orNone(h.faultKinds), d.Replica, d.Fault)
		} else if inOrder && in.lastPhase == 1 && a.start < in.lastEnd+d.Backoff.Microseconds() {
			h.issue("schedule", n, "line %d: intent %d's attempt %d began %d µs after its attempt before ended; the schedule's backoff before it is %d µs",
				no, n, a.attempt, a.start-in.lastEnd, d.Backoff.Microseconds())
		}
	} else {
		in.quietN = min(in.quietN+1, 1<<16-1)
		d := h.sched.Quiet(int(n), int(a.attempt))
		if a.replica != int64(d.Replica) || len(a.fault) != 0 {
			h.issue("schedule", n, "line %d: intent %d's quiet attempt %d went to replica %d with fault %q; the quiet phase sends it to replica %d ((intent + attempt) mod %d) with none",
				no, n, a.attempt, a.replica, a.fault, d.Replica, h.replicas)
		} else if inOrder && in.lastPhase == 2 && a.start < in.lastEnd+d.Backoff.Microseconds() {
			h.issue("schedule", n, "line %d: intent %d's quiet attempt %d began %d µs after its attempt before ended; the quiet phase waits %d µs",
				no, n, a.attempt, a.start-in.lastEnd, d.Backoff.Microseconds())
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

// checkConsistency runs the end checks on a whole history.
func (h *chaosHistory) checkConsistency(p chaosRunParams) {
	h.checkIntentsAndAttempts(p)
	placeOf := h.checkPlaces()
	if h.target == "" {
		h.checkEffectsAndReplays(placeOf)
	}
	h.checkEventsAndKills(p)
}

// checkIntentsAndAttempts checks that intents are numbered 0..N-1 (unless
// a cap stopped the clients), none making more attempts than max_attempts
// and quiet_attempts allow.
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

// checkPlaces checks where the store keeps its state (a target: the
// sink's journal) and returns each replica's place (the first that lists
// it).
func (h *chaosHistory) checkPlaces() map[int64]int64 {
	placeOf := map[int64]int64{}
	for _, pl := range h.places {
		for _, r := range pl.replicas {
			if _, ok := placeOf[r]; !ok {
				placeOf[r] = pl.place
			}
		}
	}
	shared := "the " + h.store + " store keeps one state every replica shares"
	if h.target != "" {
		shared = "a target's journal is its sink's, every replica's"
	}
	switch {
	case h.target != "" || h.store == "durable" || h.store == "postgres":
		if len(h.places) != 1 || len(h.places[0].replicas) != h.replicas {
			h.issue("places", -1, "%d places (%s); %s: one place holding replicas 0..%d", len(h.places), placesText(h.places), shared, h.replicas-1)
		}
	case h.store == "volatile":
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

// checkEffectsAndReplays checks that an intent has no more effects at a
// place than it made attempts there that may have applied it (no reply,
// or a 2xx not marked replayed), and that a reply marked replayed follows
// an earlier attempt of its intent at the same place that got no reply
// (the one whose result it replays), its value below that of every reply
// not replayed at that place that began after it ended.
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
				h.issue("effects", in.number, "intent %d has %d effects at place %d, but made %d attempts there that may have applied it (no reply, or a 2xx not replayed)",
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

// checkEventsAndKills checks each replica's server events in their order,
// and every planned kill of the nemesis's seeded plan against the kill or
// kill_skipped event that names it.
func (h *chaosHistory) checkEventsAndKills(p chaosRunParams) {
	ec := &eventCheck{h: h, p: p, state: make([]int, h.replicas), byKill: make([]bool, h.replicas),
		plan: h.plannedKills(p.durationMS, p.killEveryMS), chaosEnd: h.chaosStartUS + p.durationMS*1000, lastKill: make([]*lastKill, h.replicas)}
	for _, e := range h.serverEvents {
		if ec.lifecycle(e) && (e.kind == "kill" || e.kind == "kill_skipped") {
			ec.planned(e)
		}
	}
	ec.end()
}

// A replica's state, as its events tell it.
const (
	replicaDown = iota
	replicaUp
	replicaKilled // by the nemesis or a fault: its exit comes next
	replicaStopped
)

// eventCheck is checkEventsAndKills's state.
type eventCheck struct {
	h        *chaosHistory
	p        chaosRunParams
	state    []int
	byKill   []bool // per replica: a kill or a fault's kill of its running process
	plan     []chaosplan.Kill
	chaosEnd int64       // the chaos phase ends: the supervisor restarts at once from then on
	next     int         // the planned kill the next kill or kill_skipped must name
	lastKill []*lastKill // per replica, the last kill the nemesis made of it
}

// lastKill is a kill the nemesis made: its planned down time, and its
// exit (-1 until seen).
type lastKill struct{ downUS, exitAt int64 }

// lifecycle checks event e against its replica's state and moves it on
// (a kill or a fault's kill is followed by the replica's exit, every exit
// by a restart, no sooner than a kill's planned down time while the chaos
// phase lasts; a process ends by SIGKILL only after a kill or a fault's
// kill of it); false when e did not fit the state.
func (ec *eventCheck) lifecycle(e chaosEvent) bool {
	r := e.replica
	bad := func(format string, args ...any) bool {
		ec.h.issue("events", -1, "line %d: replica %d: %s at %d µs: %s", e.no, r, e.kind, e.at, fmt.Sprintf(format, args...))
		return false
	}
	switch e.kind {
	case "start":
		if ec.state[r] != replicaDown {
			return bad("it was not down")
		}
		if k := ec.lastKill[r]; k != nil && k.exitAt >= 0 && e.at < ec.chaosEnd && e.at < k.exitAt+k.downUS {
			ec.h.issue("kills", -1, "line %d: replica %d restarted %d µs after its kill's exit; the plan keeps it down %d µs", e.no, r, e.at-k.exitAt, k.downUS)
		}
		ec.lastKill[r] = nil
		ec.state[r], ec.byKill[r] = replicaUp, false
	case "start_failed":
		if ec.state[r] != replicaDown {
			bad("it was not down")
		}
	case "kill", "fault_kill":
		if ec.state[r] != replicaUp {
			return bad("it was not up")
		}
		ec.state[r], ec.byKill[r] = replicaKilled, true
	case "exit":
		switch {
		case ec.state[r] != replicaUp && ec.state[r] != replicaKilled:
			return bad("it was not running")
		case e.code == sigkillExit && !ec.byKill[r]:
			bad("SIGKILL ended it (%d), and no kill or fault's kill of it came since it started", e.code)
		}
		if k := ec.lastKill[r]; k != nil && k.exitAt < 0 {
			k.exitAt = e.at
		}
		ec.state[r] = replicaDown
	case "stop":
		if ec.state[r] != replicaUp {
			return bad("it was not up (a stop ends the run of a replica that is up)")
		}
		ec.state[r] = replicaStopped
	}
	return true
}

// planned checks a kill or kill_skipped event against the planned kill it
// must name, the next of the plan: its replica, a kill no sooner than
// planned, a skip for one of the lab's reasons (no sooner than planned
// either, unless the chaos phase ended first).
func (ec *eventCheck) planned(e chaosEvent) {
	h, r := ec.h, e.replica
	if e.planned != int64(ec.next) || ec.next >= len(ec.plan) {
		h.issue("kills", -1, "line %d: %s of planned kill %d; the nemesis's plan for seed %d (%d planned, every %d ms over %d ms) names planned kill %d next",
			e.no, e.kind, e.planned, h.seed, len(ec.plan), ec.p.killEveryMS, ec.p.durationMS, ec.next)
		ec.next = max(ec.next, int(e.planned)+1)
		return
	}
	q := ec.plan[ec.next]
	ec.next++
	due := h.chaosStartUS + q.At.Microseconds()
	switch {
	case r != int64(q.Replica):
		h.issue("kills", -1, "line %d: %s of planned kill %d is of replica %d; the plan's is of replica %d", e.no, e.kind, e.planned, r, q.Replica)
	case e.kind == "kill" && e.at < due:
		h.issue("kills", -1, "line %d: planned kill %d came at %d µs, before its time (%d µs)", e.no, e.planned, e.at, due)
	case e.kind == "kill_skipped" && e.reason < 0:
		h.issue("kills", -1, "line %d: planned kill %d skipped for a reason that is none of the lab's (%q, ...)", e.no, e.planned, chaosplan.SkipReasons[0])
	case e.kind == "kill_skipped" && chaosplan.SkipReasons[e.reason] != chaosplan.SkipPhaseEnd && e.at < due:
		h.issue("kills", -1, "line %d: planned kill %d skipped at %d µs, before its time (%d µs)", e.no, e.planned, e.at, due)
	}
	if e.kind == "kill" {
		ec.lastKill[r] = &lastKill{downUS: q.Down.Microseconds(), exitAt: -1}
	}
}

// end checks that every replica started (h.started: a replica's first
// start always fits its state, down), ended stopped, and that every
// planned kill was named.
func (ec *eventCheck) end() {
	h := ec.h
	for r, st := range ec.state {
		switch {
		case !h.started[r]:
			h.issue("events", -1, "replica %d never started", r)
		case st == replicaKilled:
			h.issue("events", -1, "replica %d: killed, and no exit follows", r)
		case st != replicaStopped:
			h.issue("events", -1, "replica %d: no final stop (every replica is up at the end, and stopped)", r)
		}
	}
	if ec.next < len(ec.plan) {
		h.issue("kills", -1, "planned kills %d to %d of the %d the nemesis's plan holds: neither a kill nor a kill_skipped event names them", ec.next, len(ec.plan)-1, len(ec.plan))
	}
}

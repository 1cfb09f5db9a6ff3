package chaos

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// A Rule names one thing the checker looks for.
type Rule string

// The rules, in the order findings are listed.
const (
	// RuleDuplicate: the journal holds two or more effects of one intent.
	RuleDuplicate Rule = "duplicate"
	// RuleLostAck: the intent got a 200 reply, and the journal holds no
	// effect of it.
	RuleLostAck Rule = "lost_ack"
	// RuleStuck: the intent never got a 200 reply (it may or may not have
	// been applied).
	RuleStuck Rule = "stuck"
	// RuleValueMismatch: a 200 reply's value is not the value of an effect
	// of that intent at the place of the replica that replied (or is not
	// a number), or, where the journal says when each effect was applied
	// (the sink's does), of one applied after the reply ended. Checked
	// only for intents the journal applied.
	RuleValueMismatch Rule = "value_mismatch"
	// RuleValueReused: two non-replayed 200 replies from one place carry
	// the same value.
	RuleValueReused Rule = "value_reused"
	// RuleValueOrder: a non-replayed 200 reply carries a value smaller
	// than one acknowledged, at the same place, before its attempt began.
	// One finding per such earlier acknowledgement, naming the reply with
	// the smallest value it exceeds.
	RuleValueOrder Rule = "value_order"
	// RuleUnknownEffect: the journal holds an effect whose body no intent
	// of the history sent.
	RuleUnknownEffect Rule = "unknown_effect"
	// RuleBadJournal: a place's journal is not the effects 1..counter in
	// order, or a replica's place is not listed exactly once.
	RuleBadJournal Rule = "bad_journal"
)

// Rules lists every rule in listing order.
var Rules = []Rule{RuleDuplicate, RuleLostAck, RuleStuck, RuleValueMismatch, RuleValueReused, RuleValueOrder, RuleUnknownEffect, RuleBadJournal}

// Promised reports whether what h ran on promises that rule r never fires,
// judged by its claims: every store and target is held to every rule but
// the duplicate, which only a durable store of keys rules out (keys that
// survive a restart), shared by the replicas when there are several. The
// volatile store (keys in one process's memory) and a target claiming no
// durable store run an intent again after a restart, or on another
// replica: their duplicates are counted and shown, the lesson, not
// violations.
func (h History) Promised(r Rule) bool {
	return Promises(h.Claims, h.Replicas, r)
}

// Promises is Promised for claims c and that many replicas.
func Promises(c Claims, replicas int, r Rule) bool {
	return r != RuleDuplicate || c.Durable && (replicas == 1 || c.SharedStore)
}

// A Finding is one rule firing, naming the intent (-1 when the finding is
// about the journal rather than an intent).
type Finding struct {
	Rule   Rule   `json:"rule"`
	Intent int    `json:"intent"`
	Key    string `json:"key"`
	Detail string `json:"detail"`
}

// A Check is what the checker found in one history.
type Check struct {
	Intents     int       // distinct intents with at least one attempt
	Acked       int       // intents with at least one 200 reply
	AppliedOnce int       // intents the journal holds exactly once
	Duplicates  int       // intents the journal holds twice or more
	NotApplied  int       // intents the journal does not hold
	LostAcks    int       // acknowledged intents the journal does not hold
	Stuck       int       // intents never acknowledged
	Findings    []Finding // sorted by rule (Rules order), then intent, then detail
}

// Violations returns the findings h's claims promise never to have.
func (c Check) Violations(h History) []Finding {
	var out []Finding
	for _, f := range c.Findings {
		if h.Promised(f.Rule) {
			out = append(out, f)
		}
	}
	return out
}

// CheckHistory checks h against its own journal. It is a pure function:
// the same history gives the same Check.
//
// Per intent (the intents are those with an attempt in h; an intent is
// named by its body's SHA-256, which is unique per intent, and the
// journal keeps that SHA-256 for every applied effect):
//
//   - applied n times, n = the number of journal effects, over every place,
//     with the intent's body: n = 1 is exactly once, n ≥ 2 a duplicate;
//   - acknowledged: some attempt got a 200 reply; acknowledged with n = 0 is
//     a lost acknowledgement; never acknowledged is stuck;
//   - every 200 reply's value is the value of one of the intent's effects at
//     the place of the replica that replied (when n ≥ 1), applied before
//     the reply ended where the journal records when (a replay carries
//     the value of an effect that happened earlier).
//
// Over the acknowledged values, per place: a non-replayed 200 reports the
// effect its own request ran, so (a) no two carry one value, and (b) if
// reply A ended before attempt B started, A's value is smaller than B's.
// A violation of (b) is reported once per A (see RuleValueOrder), so one
// wrong value does not make every later reply a finding.
//
// Why (a) and (b) instead of a linearizability checker such as porcupine:
// the object is a counter whose only operation is "add one and return the
// new value", and the journal numbers the effects 1..counter in the order
// they were applied. That numbering is the only order the effects could
// have been linearized in (the state after the k-th effect is k), so the
// search porcupine does over orderings has exactly one candidate, and it
// is linearizable iff each acknowledged value belongs to its own effect
// (the value rule above), no value is handed out twice (a), and the
// numbering respects real time between acknowledged operations (b).
// Indeterminate attempts (info) need no check: the journal says whether
// they took effect, and an unacknowledged effect may sit anywhere in the
// order. (b) is checked in O(n log n) by a sweep over the replies sorted
// by end, against the attempts sorted by start; porcupine's search is
// exponential in the worst case and its verdict would add nothing here.
func CheckHistory(h History) Check {
	var c Check
	add := func(r Rule, intent int, key, format string, args ...any) {
		c.Findings = append(c.Findings, Finding{Rule: r, Intent: intent, Key: key, Detail: fmt.Sprintf(format, args...)})
	}

	// The places: which place each replica's state lives at, and each
	// journal's effects by body.
	placeOf := map[int]int{}
	for _, p := range h.Places {
		for _, r := range p.Replicas {
			if old, dup := placeOf[r]; dup {
				add(RuleBadJournal, -1, "", "replica %d listed at places %d and %d", r, old, p.Place)
			}
			placeOf[r] = p.Place
		}
		if int64(len(p.Effects)) != p.Counter {
			add(RuleBadJournal, -1, "", "place %d: counter %d, %d effects journaled", p.Place, p.Counter, len(p.Effects))
		}
		for i, e := range p.Effects {
			if e.Value != int64(i+1) {
				add(RuleBadJournal, -1, "", "place %d: effect %d has value %d, want %d", p.Place, i+1, e.Value, i+1)
				break
			}
		}
	}
	for r := 0; r < h.Replicas; r++ {
		if _, ok := placeOf[r]; !ok {
			add(RuleBadJournal, -1, "", "replica %d has no place", r)
		}
	}

	// The intents, in number order, with their attempts.
	type intent struct {
		key, sha string
		acks     []int // indexes into h.Attempts of 200 replies
	}
	intents := map[int]*intent{}
	bySHA := map[string]int{}
	for i, a := range h.Attempts {
		in := intents[a.Intent]
		if in == nil {
			in = &intent{key: a.Key, sha: a.BodySHA256}
			intents[a.Intent] = in
			bySHA[a.BodySHA256] = a.Intent
		}
		if a.Status == http.StatusOK {
			in.acks = append(in.acks, i)
		}
	}
	// applied[intent][place] lists the values of its effects there;
	// appliedAt says when an effect was applied, where the journal says.
	applied := map[int]map[int][]int64{}
	appliedAt := map[[2]int64]int64{}
	effectsOf := map[int][]Effect{}
	for _, p := range h.Places {
		for _, e := range p.Effects {
			if n, ok := bySHA[e.BodySHA256]; ok {
				effectsOf[n] = append(effectsOf[n], e)
			}
			if e.AtUS != nil {
				appliedAt[[2]int64{int64(p.Place), e.Value}] = *e.AtUS
			}
			n, ok := bySHA[e.BodySHA256]
			if !ok {
				add(RuleUnknownEffect, -1, "", "place %d: effect %d has body SHA-256 %s, which no intent sent", p.Place, e.Value, e.BodySHA256)
				continue
			}
			if applied[n] == nil {
				applied[n] = map[int][]int64{}
			}
			applied[n][p.Place] = append(applied[n][p.Place], e.Value)
		}
	}

	numbers := make([]int, 0, len(intents))
	for n := range intents {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	c.Intents = len(numbers)
	for _, n := range numbers {
		in := intents[n]
		times := 0
		var where []string
		for _, pl := range sortedKeys(applied[n]) {
			times += len(applied[n][pl])
			where = append(where, fmt.Sprintf("place %d values %v", pl, applied[n][pl]))
		}
		switch {
		case times == 0:
			c.NotApplied++
		case times == 1:
			c.AppliedOnce++
		default:
			c.Duplicates++
			add(RuleDuplicate, n, in.key, "applied %d times: %v%s", times, where, how(h, effectsOf[n]))
		}
		if len(in.acks) == 0 {
			c.Stuck++
			add(RuleStuck, n, in.key, "never acknowledged; applied %d times", times)
			continue
		}
		c.Acked++
		if times == 0 {
			c.LostAcks++
			a := h.Attempts[in.acks[0]]
			add(RuleLostAck, n, in.key, "attempt %d on replica %d got 200 %q, and the journal holds no effect of it", a.Attempt, a.Replica, a.Value)
			continue
		}
		for _, i := range in.acks {
			a := h.Attempts[i]
			v, err := strconv.ParseInt(a.Value, 10, 64)
			pl, ok := placeOf[a.Replica]
			if err != nil || !ok || !slices.Contains(applied[n][pl], v) {
				add(RuleValueMismatch, n, in.key, "attempt %d on replica %d got 200 %q; the intent's effects: %v", a.Attempt, a.Replica, a.Value, where)
				continue
			}
			if at, known := appliedAt[[2]int64{int64(pl), v}]; known && at > a.EndUS {
				add(RuleValueMismatch, n, in.key, "attempt %d on replica %d got 200 %q at %d µs; that effect was applied at %d µs, after the reply", a.Attempt, a.Replica, a.Value, a.EndUS, at)
			}
		}
	}

	// The values of non-replayed acknowledgements, per place.
	type ack struct {
		value      int64
		start, end int64
		intent     int
		attempt    int
	}
	perPlace := map[int][]ack{}
	for _, a := range h.Attempts {
		if a.Status != http.StatusOK || a.Replayed == nil || *a.Replayed {
			continue
		}
		v, err := strconv.ParseInt(a.Value, 10, 64)
		pl, ok := placeOf[a.Replica]
		if err != nil || !ok {
			continue // a value_mismatch already
		}
		perPlace[pl] = append(perPlace[pl], ack{v, a.StartUS, a.EndUS, a.Intent, a.Attempt})
	}
	for _, pl := range sortedKeys(perPlace) {
		acks := perPlace[pl]
		byValue := slices.Clone(acks)
		slices.SortFunc(byValue, func(a, b ack) int {
			return cmp.Or(cmp.Compare(a.value, b.value), cmp.Compare(a.intent, b.intent), cmp.Compare(a.attempt, b.attempt))
		})
		for i := 1; i < len(byValue); i++ {
			a, b := byValue[i-1], byValue[i]
			if a.value == b.value {
				add(RuleValueReused, b.intent, intents[b.intent].key, "place %d: value %d acknowledged (not replayed) to intent %d attempt %d and intent %d attempt %d",
					pl, b.value, a.intent, a.attempt, b.intent, b.attempt)
			}
		}
		// Sweep: for each reply B by start, the largest value among the
		// replies that ended before B started (its culprit A). One
		// finding per culprit, so that one wrong value does not turn
		// every later reply into a finding: it names the reply with the
		// smallest value among those A's value exceeds.
		byEnd := slices.Clone(acks)
		slices.SortFunc(byEnd, func(a, b ack) int { return cmp.Compare(a.end, b.end) })
		byStart := slices.Clone(acks)
		slices.SortFunc(byStart, func(a, b ack) int { return cmp.Compare(a.start, b.start) })
		type blame struct {
			n        int
			smallest ack
		}
		blamed := map[int]*blame{} // index into byEnd of the culprit
		j, best := 0, -1
		for _, b := range byStart {
			for j < len(byEnd) && byEnd[j].end < b.start {
				if best < 0 || byEnd[j].value > byEnd[best].value {
					best = j
				}
				j++
			}
			if best >= 0 && byEnd[best].value > b.value {
				bl := blamed[best]
				if bl == nil {
					bl = &blame{smallest: b}
					blamed[best] = bl
				}
				bl.n++
				if b.value < bl.smallest.value {
					bl.smallest = b
				}
			}
		}
		for _, i := range sortedKeys(blamed) {
			a, bl := byEnd[i], blamed[i]
			b := bl.smallest
			add(RuleValueOrder, b.intent, intents[b.intent].key,
				"place %d: attempt %d began at %d µs and got value %d, but intent %d was acknowledged value %d at %d µs, before it began (%d later attempts got a value below %d)",
				pl, b.attempt, b.start, b.value, a.intent, a.value, a.end, bl.n, a.value)
		}
	}

	order := map[Rule]int{}
	for i, r := range Rules {
		order[r] = i
	}
	slices.SortStableFunc(c.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(order[a.Rule], order[b.Rule]), cmp.Compare(a.Intent, b.Intent), cmp.Compare(a.Detail, b.Detail))
	})
	return c
}

// how says, for a duplicate whose effects the journal timed and placed
// (the sink's journal does), what came between each two of them: another
// replica, a restart of the replica (its process ended: the crash gap or a
// kill), or nothing, one process applying both (its in-flight guard let a
// retry through, or it forgot a key whose effect it had applied, such as
// one whose handler failed after the effect). "" where the journal does
// not say.
func how(h History, es []Effect) string {
	for _, e := range es {
		if e.AtUS == nil || e.Replica == nil {
			return ""
		}
	}
	es = slices.Clone(es)
	slices.SortFunc(es, func(a, b Effect) int { return cmp.Compare(*a.AtUS, *b.AtUS) })
	var parts []string
	for i := 1; i < len(es); i++ {
		a, b := es[i-1], es[i]
		switch {
		case *a.Replica != *b.Replica:
			parts = append(parts, fmt.Sprintf("values %d and %d on replicas %d and %d", a.Value, b.Value, *a.Replica, *b.Replica))
		case ended(h, *a.Replica, *a.AtUS, *b.AtUS):
			parts = append(parts, fmt.Sprintf("values %d and %d on replica %d, its process ended between them", a.Value, b.Value, *a.Replica))
		default:
			parts = append(parts, fmt.Sprintf("values %d and %d by one process of replica %d, no restart between them", a.Value, b.Value, *a.Replica))
		}
	}
	return "; " + strings.Join(parts, "; ")
}

// ended reports whether replica r's process ended (killed, or exited)
// between from and to.
func ended(h History, r int, from, to int64) bool {
	for _, e := range h.Servers {
		if e.Replica == r && e.AtUS > from && e.AtUS < to && (e.Kind == EventExit || e.Kind == EventKill || e.Kind == EventFaultKill) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

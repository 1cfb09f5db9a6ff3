package chaosplan

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// digest is a fingerprint of s's decisions for intents 0..999, attempts
// 0..9 and one quiet attempt each, and of its kill plans for 60 s every
// 300 ms and 3 s every 500 ms.
func digest(s Schedule) string {
	h := sha256.New()
	for i := range 1000 {
		for n := range 10 {
			d := s.Attempt(i, n)
			fmt.Fprintf(h, "%d %s %d|", d.Replica, d.Fault, d.Backoff.Microseconds())
		}
		q := s.Quiet(i, 3)
		fmt.Fprintf(h, "%d %d|", q.Replica, q.Backoff.Microseconds())
	}
	for _, k := range append(s.Kills(60*time.Second, 300*time.Millisecond), s.Kills(3*time.Second, 500*time.Millisecond)...) {
		fmt.Fprintf(h, "%d %d %d|", k.At.Microseconds(), k.Replica, k.Down.Microseconds())
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

// Ensure the plan is the one the lab ran and the audit checked when each
// drew its own (both gave these digests): a change to any draw changes
// every recorded history's schedule, and the audit would refuse them all.
func TestScheduleUnchanged(t *testing.T) {
	for _, tc := range []struct {
		faults []string
		want   string
	}{
		{StoreFaults, "[2e482cb0b411ed86 cf02b4fcbe84cfcf d7a15353c9282abd 2daf2f2735de2bc0]"},
		{FaultKinds, "[94d07d98182e663b 467deec22605343d cd1c713df8d0b648 f010218f4f90ea36]"},
		{[]string{"drop-reply", "give-up"}, "[35456ff142c1a733 3f2f010d53033ac3 6c2906273e4407a5 30c3e582e4790a2a]"},
		{[]string{}, "[aa14941bb6c0c26f 9a497ad84389e666 333cf582b9a975bb 98e042c36171a6f2]"},
	} {
		var got []string
		for _, seed := range []uint64{1, 1<<63 + 5} {
			for _, replicas := range []int{1, 3} {
				got = append(got, digest(Schedule{Seed: seed, Replicas: replicas, Faults: tc.faults}))
			}
		}
		if s := fmt.Sprint(got); s != tc.want {
			t.Errorf("faults %v: digests %s, want %s", tc.faults, s, tc.want)
		}
	}
}

// Ensure the schedule is a pure function of (seed, intent, attempt): the
// same inputs give the same decision, in any order, and another seed gives
// another schedule.
func TestSchedulePure(t *testing.T) {
	s := Schedule{Seed: 42, Replicas: 3, Faults: StoreFaults}
	const intents, attempts = 200, 8
	draw := func(s Schedule, reverse bool) map[[2]int]Decision {
		out := map[[2]int]Decision{}
		for k := range intents * attempts {
			if reverse {
				k = intents*attempts - 1 - k
			}
			out[[2]int{k / attempts, k % attempts}] = s.Attempt(k/attempts, k%attempts)
		}
		return out
	}
	fwd := draw(s, false)
	if got := draw(s, true); fmt.Sprint(got) != fmt.Sprint(fwd) {
		t.Fatal("drawing the schedule in reverse order gives other decisions")
	}
	if other := draw(Schedule{Seed: 43, Replicas: 3, Faults: StoreFaults}, false); fmt.Sprint(other) == fmt.Sprint(fwd) {
		t.Fatal("seeds 42 and 43 give the same schedule")
	}
	kills := func(seed uint64) string {
		return fmt.Sprint(Schedule{Seed: seed, Replicas: 3}.Kills(time.Minute, 500*time.Millisecond))
	}
	if kills(42) != kills(42) {
		t.Fatal("the same kill plan drawn twice differs")
	}
	if kills(42) == kills(43) {
		t.Fatal("seeds 42 and 43 give the same kill plan")
	}
}

// kindsOf splits a fault value into the names of its faults, without
// arguments: "delay=5ms,drop-reply" is delay and drop-reply.
func kindsOf(v string) []string {
	var out []string
	for part := range strings.SplitSeq(v, ",") {
		if name, arg, ok := strings.Cut(part, "="); name != "" {
			if ok != TakesArg(name) || ok && !strings.HasSuffix(arg, "ms") {
				panic("fault " + v + ": argument of " + name)
			}
			out = append(out, name)
		}
	}
	return out
}

// Ensure every replica is in range, every kind of the store's is drawn,
// each with an argument where it takes one, the share of faulted attempts
// is near the table's, and backoffs stay under their cap.
func TestScheduleRanges(t *testing.T) {
	s := Schedule{Seed: 1, Replicas: 2, Faults: StoreFaults}
	const n = 100000
	kinds := map[string]int{}
	replicas := map[int]int{}
	faulted := 0
	for i := range n {
		d := s.Attempt(i, i%5)
		replicas[d.Replica]++
		if d.Backoff < 0 || d.Backoff >= backoffCap {
			t.Fatalf("Attempt(%d, %d).Backoff = %v, outside [0, %v)", i, i%5, d.Backoff, backoffCap)
		}
		if i%5 == 0 && d.Backoff != 0 {
			t.Fatalf("Attempt(%d, 0).Backoff = %v, want 0 before the first attempt", i, d.Backoff)
		}
		if d.Fault != "" {
			faulted++
		}
		for _, k := range kindsOf(d.Fault) {
			kinds[k]++
		}
	}
	for _, k := range StoreFaults {
		if kinds[k] == 0 {
			t.Errorf("fault %s never drawn in %d attempts", k, n)
		}
	}
	if len(replicas) != 2 || replicas[0] < n*45/100 || replicas[1] < n*45/100 {
		t.Errorf("replicas drawn %v, want about half each of 0 and 1", replicas)
	}
	want := 0
	for _, f := range faultMix {
		if s.places(f.kinds) {
			want += f.per10k
		}
	}
	if got := faulted * 10000 / n; got < want-100 || got > want+100 {
		t.Errorf("faulted %d per 10,000 attempts, want about %d", got, want)
	}
	for i := range 50 {
		if d := s.Quiet(i, 3); d.Fault != "" || d.Replica != (i+3)%2 || d.Backoff != QuietBackoff {
			t.Fatalf("Quiet(%d, 3) = %+v, want no fault, replica %d", i, d, (i+3)%2)
		}
	}
}

// Ensure the kill plan stays inside the chaos phase, is spaced as
// documented, and is bounded.
func TestKills(t *testing.T) {
	s := Schedule{Seed: 9, Replicas: 3}
	every := 200 * time.Millisecond
	kills := s.Kills(10*time.Second, every)
	if len(kills) < 30 || len(kills) > 70 {
		t.Fatalf("%d kills in 10s every %v, want about 50", len(kills), every)
	}
	var last time.Duration
	for _, k := range kills {
		if gap := k.At - last; gap < every/2 || gap >= every*3/2 {
			t.Errorf("kill at %v, %v after the last, want [%v, %v)", k.At, gap, every/2, every*3/2)
		}
		if k.At >= 10*time.Second || k.Replica < 0 || k.Replica >= 3 || k.Down < 20*time.Millisecond || k.Down >= 200*time.Millisecond {
			t.Errorf("kill %+v out of range", k)
		}
		last = k.At
	}
	if got := len(s.Kills(time.Hour, time.Millisecond)); got != MaxKills {
		t.Errorf("len(Kills(1h, 1ms)) = %d, want the cap %d", got, MaxKills)
	}
	if got := s.Kills(time.Second, 0); len(got) != 0 {
		t.Errorf("Kills(1s, 0) = %v, want none", got)
	}
}

// Ensure the fault set changes only which drawn faults are sent: on every
// set an attempt has the same replica and backoff, and its fault is the
// one drawn or none; a store's schedule sends only the lab server's kinds,
// and with every kind allowed each is drawn.
func TestScheduleFaultKinds(t *testing.T) {
	store := Schedule{Seed: 5, Replicas: 2, Faults: StoreFaults}
	all := Schedule{Seed: 5, Replicas: 2, Faults: FaultKinds}
	few := Schedule{Seed: 5, Replicas: 2, Faults: []string{"drop-reply", "give-up"}}
	seen := map[string]int{}
	for i := range 20000 {
		a, b, c := store.Attempt(i, i%3), all.Attempt(i, i%3), few.Attempt(i, i%3)
		if a.Replica != b.Replica || c.Replica != a.Replica || a.Backoff != b.Backoff || c.Backoff != a.Backoff {
			t.Fatalf("Attempt(%d): replica or backoff differ between fault sets: %+v %+v %+v", i, a, b, c)
		}
		if a.Fault != "" && a.Fault != b.Fault {
			t.Fatalf("Attempt(%d): the store's fault %q, with every kind %q", i, a.Fault, b.Fault)
		}
		for _, k := range kindsOf(a.Fault) {
			if !slices.Contains(StoreFaults, k) {
				t.Fatalf("Attempt(%d) on a store carries %s", i, k)
			}
		}
		for _, k := range kindsOf(c.Fault) {
			if k != "drop-reply" && k != "give-up" {
				t.Fatalf("Attempt(%d) with faults drop-reply, give-up carries %s", i, k)
			}
		}
		for _, k := range kindsOf(b.Fault) {
			seen[k]++
		}
	}
	for _, k := range FaultKinds {
		if seen[k] == 0 {
			t.Errorf("fault kind %s never drawn with every kind allowed", k)
		}
	}
}

package chaos

import (
	"fmt"
	"testing"
	"time"

	"idemlab/internal/effectserver/faultheader"
)

// Ensure the schedule is a pure function of (seed, intent, attempt): the
// same inputs give the same decision, in any order, and another seed gives
// another schedule.
func TestSchedulePure(t *testing.T) {
	s := Schedule{Seed: 42, Replicas: 3}
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
	if other := draw(Schedule{Seed: 43, Replicas: 3}, false); fmt.Sprint(other) == fmt.Sprint(fwd) {
		t.Fatal("seeds 42 and 43 give the same schedule")
	}
	kills := func(seed uint64) string {
		return fmt.Sprint(Schedule{seed, 3}.Kills(time.Minute, 500*time.Millisecond))
	}
	if kills(42) != kills(42) {
		t.Fatal("the same kill plan drawn twice differs")
	}
	if kills(42) == kills(43) {
		t.Fatal("seeds 42 and 43 give the same kill plan")
	}
}

// Ensure every fault the schedule sends is one the server accepts
// (faultheader.Parse), every replica is in range, every kind is drawn (but
// the downstream mode's, which need a server with -downstream), the
// share of faulted attempts is near the table's, and backoffs stay under
// their cap.
func TestScheduleRanges(t *testing.T) {
	s := Schedule{Seed: 1, Replicas: 2}
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
		if d.Fault == "" {
			continue
		}
		faulted++
		if _, err := faultheader.Parse(d.Fault); err != nil {
			t.Fatalf("Attempt(%d, %d).Fault = %q: %v", i, i%5, d.Fault, err)
		}
		for _, k := range faultKinds(d.Fault) {
			kinds[k]++
		}
	}
	for _, k := range faultheader.Names() {
		if f, err := faultheader.Parse(k); err == nil && (f.Downstream() || f.RegistryOnly()) {
			continue // the downstream mode's faults, and the fail faults the cases show: not this experiment's
		}
		if kinds[k] == 0 {
			t.Errorf("fault %s never drawn in %d attempts", k, n)
		}
	}
	if len(replicas) != 2 || replicas[0] < n*45/100 || replicas[1] < n*45/100 {
		t.Errorf("replicas drawn %v, want about half each of 0 and 1", replicas)
	}
	want := 0
	for _, f := range faultMix {
		want += f.per10k
	}
	if got := faulted * 10000 / n; got < want-100 || got > want+100 {
		t.Errorf("faulted %d per 10,000 attempts, want about %d", got, want)
	}
	for i := range 50 {
		if d := s.Quiet(i, 3); d.Fault != "" || d.Replica != (i+3)%2 {
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
	if got := len(s.Kills(time.Hour, time.Millisecond)); got != maxKills {
		t.Errorf("len(Kills(1h, 1ms)) = %d, want the cap %d", got, maxKills)
	}
	if got := s.Kills(time.Second, 0); len(got) != 0 {
		t.Errorf("Kills(1s, 0) = %v, want none", got)
	}
}

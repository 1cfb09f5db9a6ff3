package chaos

import (
	"slices"
	"testing"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/effectserver/faultheader"
	"idemlab/internal/target"
)

// Ensure the plan's fault vocabulary (chaosplan, the audit's) is the lab's:
// every kind of the store's is a fault the lab's server takes, with an
// argument where the plan gives one; the one other kind is give-up, which
// only a target's proxy places; every fault the server takes but the
// downstream mode's is among them; and every fault value the plan sends on
// a store is one the server accepts (faultheader.Parse).
func TestPlanFaultsAreTheLabs(t *testing.T) {
	for _, k := range chaosplan.StoreFaults {
		v := k
		if chaosplan.TakesArg(k) {
			v += "=1ms"
		}
		if _, err := faultheader.Parse(v); err != nil {
			t.Errorf("plan fault kind %s: the lab's server refuses %q: %v", k, v, err)
		}
	}
	if got, want := chaosplan.FaultKinds, append(slices.Clone(chaosplan.StoreFaults), target.FaultGiveUp); !slices.Equal(got, want) {
		t.Errorf("chaosplan.FaultKinds = %v, want the store's and %s", got, target.FaultGiveUp)
	}
	for _, k := range faultheader.Names() {
		if f, err := faultheader.Parse(k); err == nil && f.Downstream() {
			continue // the downstream mode's: not this experiment's
		}
		if !slices.Contains(chaosplan.StoreFaults, k) {
			t.Errorf("the lab's server takes fault %s, which the plan never draws", k)
		}
	}
	s := chaosplan.Schedule{Seed: 1, Replicas: 2, Faults: chaosplan.StoreFaults}
	for i := range 20000 {
		if d := s.Attempt(i, i%5); d.Fault != "" {
			if _, err := faultheader.Parse(d.Fault); err != nil {
				t.Fatalf("Attempt(%d, %d).Fault = %q: %v", i, i%5, d.Fault, err)
			}
		}
	}
}

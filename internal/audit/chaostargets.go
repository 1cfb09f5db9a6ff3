package audit

import (
	"path"
	"slices"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/audit/digest"
)

// This file reads what the chaos checks need of a target in the checkout:
// its claims, whether its effects are counted at the sink, the fault kinds
// the schedule can place on it, and its folder's digest, which binds the
// history to the code it was run on.

// chaosTarget is what the chaos checks take from a target.json: its spec
// (sink: effects at the sink; journal: the target counts its effects
// itself and prints their journal, effects.journal, which chaos judges it
// by; attach: a service its user started, which chaos cannot kill), its
// claims, and the fault kinds it takes.
type chaosTarget struct {
	*targetSpec
	claims chaosClaims
	faults []string // the kinds of chaosplan.FaultKinds it takes, in that order
}

// chaosTargetSpec reads the target.json of target sub in the checkout's
// folder dir (a clean slash path ending in its name), or fails the check
// and returns nil.
func (a *auditor) chaosTargetSpec(sub chaosSubject, dir string) *chaosTarget {
	a.check()
	if !cleanRel(dir) || path.Base(dir) != sub.target {
		a.chaosFail(sub, "target_dir", "%s: %s: target_dir %q is not a clean slash path inside the checkout ending in the target's name", ChaosFile, sub, dir)
		return nil
	}
	data, err := readInside(a.opts.Root, dir+"/target.json", CapTargetFile)
	if err != nil {
		a.chaosFail(sub, "target_dir", "%s: %s: cannot read %s/target.json in the checkout: %v", ChaosFile, sub, dir, unwrapPath(err))
		return nil
	}
	spec, err := a.schemas.readTargetSpec(data)
	if err != nil {
		a.chaosFail(sub, "target_dir", "%s: %s: %s/target.json: %v", ChaosFile, sub, dir, err)
		return nil
	}
	t := &chaosTarget{targetSpec: spec, claims: chaosClaims{spec.durable, spec.sharedStore}, faults: []string{}}
	for _, k := range chaosplan.FaultKinds {
		v := k
		if chaosplan.TakesArg(k) {
			v += "=1ms"
		}
		switch {
		case spec.native[allFaults]:
			// Every lab fault goes to the target's own header: it takes
			// the kinds the lab's server speaks.
			if slices.Contains(chaosplan.StoreFaults, k) {
				t.faults = append(t.faults, k)
			}
		case placeFault(v, spec) == "":
			t.faults = append(t.faults, k)
		}
	}
	return t
}

// checkChaosDigest checks a target run's recorded folder digest against
// the audit's own digest of its folder in the checkout.
func (a *auditor) checkChaosDigest(sub chaosSubject, dir, recorded string) {
	a.check()
	switch got, err := digest.Folder(a.opts.Root, dir); {
	case err != nil:
		a.chaosFail(sub, "target_digest", "%s: %s: cannot re-derive the digest of %s in the checkout: %v", ChaosFile, sub, dir, err)
	case got != recorded:
		a.chaosFail(sub, "target_digest", "%s: %s: target_digest: expected %s (the audit's own digest of %s in the checkout), observed %s", ChaosFile, sub, got, dir, recorded)
	}
}

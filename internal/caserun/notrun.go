package caserun

import (
	"fmt"
	"strings"

	"idemlab/internal/casefile"
	"idemlab/internal/protocol"
	"idemlab/internal/target"
)

// NotRun says why case c cannot run on target t ("" when it can): no target
// section, the lab server's own ledger or key expiry, replicas without a
// shared store, a capacity or body limit not claimed, or a fault not
// placeable. The audit decides again, and judges what ran.
func NotRun(c casefile.Case, t *target.Target) string {
	switch {
	case c.Target.Sound == "":
		return "the case file has no target section"
	case c.Ledger != nil:
		return "the case drives the lab server's own ledger (its downstream mode)"
	case c.Server.KeyTTLMS > 0:
		return fmt.Sprintf("the case needs keys that expire after %d ms; targets claim no key TTL", c.Server.KeyTTLMS)
	case c.Replicas > 1 && !t.Claims.SharedStore:
		return fmt.Sprintf("the case runs %d replicas; the target claims no shared store", c.Replicas)
	}
	sound := c.Expect[c.Target.Sound].Statuses()
	plan := c.Plan()
	capacity := c.Server.Capacity
	if capacity == 0 {
		capacity = protocol.DefaultCapacity
	}
	needsCapacity := c.Server.Capacity > 0
	for i, status := range sound {
		switch status {
		case 429:
			needsCapacity = true
		case 413:
			if m := t.Claims.MaxBody; m != nil && *m >= int64(plan[i].BodyLen) {
				return fmt.Sprintf("the case expects a %d-byte body to be refused; the target claims max_body %d", plan[i].BodyLen, *m)
			}
		}
	}
	if needsCapacity && (t.Claims.Capacity == nil || *t.Claims.Capacity != capacity) {
		claimed := "none"
		if t.Claims.Capacity != nil {
			claimed = fmt.Sprint(*t.Claims.Capacity)
		}
		return fmt.Sprintf("the case needs a capacity of %d keys; the target claims %s", capacity, claimed)
	}
	for _, p := range plan {
		if _, err := t.Place(p.Fault); err != nil {
			return strings.TrimPrefix(err.Error(), target.ErrNotPlaceable.Error()+": ")
		}
	}
	return ""
}

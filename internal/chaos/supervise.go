package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"idemlab/internal/audit/chaosplan"
)

// supervise is the nemesis and the supervisor: until stop, it restarts
// replicas that exited or were killed and, in the chaos phase, kills them
// as planned. A restart runs in its own goroutine, so that a replica slow
// to start holds up neither the others nor the plan. It returns once every
// restart has ended, an error only if ctx ended.
func (r *run) supervise(ctx context.Context, chaosStart time.Time, chaosOver, stop <-chan struct{}) error {
	s := r.newSupervision(chaosStart)
	defer s.starts.Wait()
	tick := time.NewTicker(superviseTick)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			s.skipRest()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case res := <-s.started:
			if err := s.restartEnded(ctx, res); err != nil {
				return err
			}
		case <-tick.C:
			s.round(ctx, chaosOver)
		}
	}
}

// supervision is supervise's state, touched only by its goroutine; a
// restart reports back on started.
type supervision struct {
	r          *run
	chaosStart time.Time
	kills      []chaosplan.Kill
	next       int         // the next planned kill
	restartAt  []time.Time // zero: nothing pending
	starting   []bool
	started    chan startResult
	starts     sync.WaitGroup
}

// newSupervision plans the run's kills (none when KillEvery is negative).
func (r *run) newSupervision(chaosStart time.Time) *supervision {
	kills := []chaosplan.Kill{}
	if r.cfg.KillEvery > 0 {
		kills = r.sched.Kills(r.cfg.Duration, r.cfg.KillEvery)
	}
	return &supervision{r: r, chaosStart: chaosStart, kills: kills,
		restartAt: make([]time.Time, r.sched.Replicas), starting: make([]bool, r.sched.Replicas),
		started: make(chan startResult, r.sched.Replicas)}
}

// skipRest records every planned kill not yet made as skipped.
func (s *supervision) skipRest() {
	for ; s.next < len(s.kills); s.next++ {
		s.r.cl.skip(s.kills[s.next].Replica, s.next, chaosplan.SkipPhaseEnd)
	}
}

// restartEnded takes in how a restart ended; a failed one is tried again
// later. One that succeeded leaves restartAt alone: the nemesis may
// already have killed the replica and planned its next restart.
func (s *supervision) restartEnded(ctx context.Context, res startResult) error {
	s.starting[res.replica] = false
	if res.err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.restartAt[res.replica] = time.Now().Add(100 * time.Millisecond)
	}
	return nil
}

// round is one tick: exits reaped, kills due made (or skipped after the
// chaos phase), restarts due begun.
func (s *supervision) round(ctx context.Context, chaosOver <-chan struct{}) {
	now := time.Now()
	for _, rep := range s.r.cl.reap() {
		s.restartAt[rep] = now.Add(crashRestartAfter)
	}
	chaos := s.inChaos(chaosOver)
	if chaos {
		s.killDue(now)
	} else {
		s.skipRest()
	}
	s.beginRestarts(ctx, chaos)
}

// inChaos reports whether the chaos phase still lasts.
func (s *supervision) inChaos(chaosOver <-chan struct{}) bool {
	select {
	case <-chaosOver:
		return false
	default:
		return !s.r.quietActive.Load()
	}
}

// killDue makes every planned kill due by now, in plan order.
func (s *supervision) killDue(now time.Time) {
	for ; s.next < len(s.kills) && now.Sub(s.chaosStart) >= s.kills[s.next].At; s.next++ {
		s.kill(s.kills[s.next], s.next)
	}
}

// kill makes planned kill i and sets its replica's restart, or records why
// it did not land.
func (s *supervision) kill(k chaosplan.Kill, i int) {
	up := s.r.cl.running()
	running := 0
	for _, u := range up {
		if u {
			running++
		}
	}
	switch {
	case !up[k.Replica]:
		s.r.cl.skip(k.Replica, i, chaosplan.SkipDown)
	case running == 1 && s.r.sched.Replicas > 1:
		s.r.cl.skip(k.Replica, i, chaosplan.SkipLastUp)
	case s.r.cl.kill(k.Replica, i) == "":
		s.restartAt[k.Replica] = time.Now().Add(k.Down)
	}
}

// beginRestarts starts every down replica whose restart is due; outside
// the chaos phase every pending restart is due at once.
func (s *supervision) beginRestarts(ctx context.Context, chaos bool) {
	up := s.r.cl.running()
	for rep, u := range up {
		// Down with nothing pending: a crash fault won the race against
		// a kill.
		if !u && !s.starting[rep] && s.restartAt[rep].IsZero() {
			s.restartAt[rep] = time.Now().Add(crashRestartAfter)
		}
	}
	started, cl := s.started, s.r.cl
	for rep, at := range s.restartAt {
		if up[rep] || s.starting[rep] || at.IsZero() || (chaos && time.Now().Before(at)) {
			continue
		}
		s.starting[rep], s.restartAt[rep] = true, time.Time{} // the restart pending is this one
		s.starts.Go(func() { started <- startResult{rep, cl.start(ctx, rep)} })
	}
}

// startResult is how a restart the supervisor began ended.
type startResult struct {
	replica int
	err     error
}

// Supervisor timing.
const (
	superviseTick     = 5 * time.Millisecond
	crashRestartAfter = 10 * time.Millisecond
)

// awaitAllUp waits, bounded, until the supervisor has every replica up.
func (r *run) awaitAllUp(ctx context.Context) error {
	deadline := time.Now().Add(2*r.readyWithin() + time.Second)
	for {
		up := r.cl.running()
		if !slices.Contains(up, false) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replicas up %v after the chaos phase; the supervisor could not restart the rest: %s", up, r.cl.lastFailure())
		}
		t := time.NewTimer(superviseTick)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// readyWithin bounds one start: the lab's server's, or the target's own.
func (r *run) readyWithin() time.Duration {
	if r.cfg.Target != nil {
		return r.cfg.Target.Start.ReadyWithin
	}
	return r.cfg.ReadyWithin
}

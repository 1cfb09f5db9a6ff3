package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/caserun"
	"idemlab/internal/protocol"
	"idemlab/internal/target"
)

// Config says what to run. Zero fields take Defaults; Run refuses values
// outside their range.
type Config struct {
	ServerPath string            // the effectserver binary (required for a store; a target's {effectserver})
	Store      protocol.Store    // the store (required unless Target is set)
	Target     *target.Target    // instead of Store: a target between the fault proxy and the sink
	StateRoot  string            // an existing folder; the run's state goes in a fresh folder inside it, removed at the end (required)
	Databases  caserun.Databases // makes the postgres store's database, or a target's postgres service's (required there only)
	Seed       uint64            // the root of every fault, replica and kill decision

	Replicas int           // 1..4 (default 2); one on a target without a shared store (ReplicasNote)
	Clients  int           // client workers, each one intent at a time, 1..64 (default 8)
	Duration time.Duration // the chaos phase, up to 10 min (default 3s)
	Faults   []string      // when not nil, the only fault kinds the schedule places

	MaxAttempts    int           // chaos-phase attempts per intent, 1..100 (default 8)
	IntentWithin   time.Duration // chaos-phase deadline per intent, from its first attempt (default 3s)
	AttemptTimeout time.Duration // the client's timeout per attempt, connection to reply (default 250ms)
	QuietWithin    time.Duration // bound on the quiet phase; an intent unresolved by then is stuck (default 15s)
	QuietAttempts  int           // quiet-phase attempts per intent, 1..1000 (default 40)
	KillEvery      time.Duration // mean time between the nemesis's kills (default 500ms; negative: no kills)
	ServerWait     time.Duration // the servers' -wait: a duplicate's wait for an in-flight owner (default 150ms)
	MaxIntents     int           // intents at most; also the servers' -capacity, so that no key meets 429 (default 50000)
	MaxHistory     int           // chaos-phase attempts at most (default 300000)
	ReadyWithin    time.Duration // a server's start to READY (default 10s)
	StopWithin     time.Duration // a server's exit after SIGTERM (default 15s)
}

// Defaults are the values zero fields of a Config take.
var Defaults = Config{
	Replicas: 2, Clients: 8, Duration: 3 * time.Second,
	MaxAttempts: 8, IntentWithin: 3 * time.Second, AttemptTimeout: 250 * time.Millisecond,
	QuietWithin: 15 * time.Second, QuietAttempts: 40, KillEvery: 500 * time.Millisecond,
	ServerWait: 150 * time.Millisecond, MaxIntents: 50000, MaxHistory: 300000,
	ReadyWithin: 10 * time.Second, StopWithin: 15 * time.Second,
}

func withDefaults(c Config) Config {
	d := Defaults
	c.Replicas = cmp.Or(c.Replicas, d.Replicas)
	c.Clients = cmp.Or(c.Clients, d.Clients)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, d.MaxAttempts)
	c.IntentWithin = cmp.Or(c.IntentWithin, d.IntentWithin)
	c.AttemptTimeout = cmp.Or(c.AttemptTimeout, d.AttemptTimeout)
	c.QuietWithin = cmp.Or(c.QuietWithin, d.QuietWithin)
	c.QuietAttempts = cmp.Or(c.QuietAttempts, d.QuietAttempts)
	c.ServerWait = cmp.Or(c.ServerWait, d.ServerWait)
	c.MaxIntents = cmp.Or(c.MaxIntents, d.MaxIntents)
	c.MaxHistory = cmp.Or(c.MaxHistory, d.MaxHistory)
	c.ReadyWithin = cmp.Or(c.ReadyWithin, d.ReadyWithin)
	c.StopWithin = cmp.Or(c.StopWithin, d.StopWithin)
	// The history records the schedule's times in ms.
	c.Duration = cmp.Or(c.Duration, d.Duration).Truncate(time.Millisecond)
	c.KillEvery = cmp.Or(c.KillEvery, d.KillEvery).Truncate(time.Millisecond)
	return c
}

// check refuses what Run cannot run, before anything starts.
func (c Config) check() error {
	if fi, err := os.Stat(c.StateRoot); err != nil || !fi.IsDir() {
		return fmt.Errorf("state root %q is not a folder", c.StateRoot)
	}
	switch {
	case c.Target != nil && c.Store != "":
		return fmt.Errorf("store %s and target %s: a run is on one or the other", c.Store, c.Target.Name)
	case c.Target != nil:
		if why := NotRunnable(c.Target); why != "" {
			return fmt.Errorf("chaos cannot run on target %s: %s", c.Target.Name, why)
		}
	case c.ServerPath == "":
		return errors.New("no server binary given")
	default:
		if _, err := protocol.ParseStore(string(c.Store)); err != nil {
			return err
		}
		if c.Store.InDatabase() && c.Databases == nil {
			return fmt.Errorf("no database server for the %s store", c.Store)
		}
	}
	if _, err := c.faults(); err != nil {
		return err
	}
	return c.CheckKnobs()
}

// NotRunnable says why the chaos experiment cannot run on t, or "": a
// target that only counts its effects gives nothing to judge an intent by.
func NotRunnable(t *target.Target) string {
	if t.Attach != nil {
		return target.NoProcessControl + ": chaos kills and restarts replicas"
	}
	if !t.Effects.Sink && len(t.Effects.Journal) == 0 {
		return "it counts its effects with a command, not at the effect sink, and names no journal command: the checker judges each intent by the journal of applied effects (which intent's body, how often), and a count after the run names no intent"
	}
	return ""
}

// name is the store's or the target's name.
func (c Config) name() string {
	if c.Target != nil {
		return c.Target.Name
	}
	return string(c.Store)
}

// claims are what the store or the target promises.
func (c Config) claims() Claims {
	if c.Target != nil {
		return Claims{Durable: c.Target.Claims.Durable, SharedStore: c.Target.Claims.SharedStore}
	}
	return StoreClaims(c.Store)
}

// replicas is how many replicas run: one on a target without a shared
// store (a retry on another replica would be a new request to it).
func (c Config) replicas() int {
	if c.Target != nil && !c.Target.Claims.SharedStore {
		return 1
	}
	return c.Replicas
}

// ReplicasNote says why fewer replicas run than asked, or "".
func (c Config) ReplicasNote() string {
	c = withDefaults(c)
	if n := c.replicas(); n != c.Replicas {
		return fmt.Sprintf("%d replica, not %d: target %s claims no shared store, so its replicas would not share keys", n, c.Replicas, c.Target.Name)
	}
	return ""
}

// faults are the fault kinds the schedule places, in chaosplan.FaultKinds
// order, or an error naming one of c.Faults that cannot be placed.
func (c Config) faults() ([]string, error) {
	can, why := chaosplan.StoreFaults, map[string]string{}
	if c.Target != nil {
		can, why = TargetFaults(c.Target)
	}
	if c.Faults == nil {
		return slices.Clone(can), nil
	}
	for _, k := range c.Faults {
		switch {
		case !slices.Contains(chaosplan.FaultKinds, k):
			return nil, fmt.Errorf("fault kind %q: unknown (known: %s)", k, strings.Join(chaosplan.FaultKinds, ", "))
		case why[k] != "":
			return nil, fmt.Errorf("fault kind %s: %s", k, why[k])
		case !slices.Contains(can, k):
			return nil, fmt.Errorf("fault kind %s: the lab's server does not take it", k)
		}
	}
	return slices.DeleteFunc(slices.Clone(chaosplan.FaultKinds), func(k string) bool { return !slices.Contains(c.Faults, k) }), nil
}

// TargetFaults returns the fault kinds t can take (target.Place places
// them), and for each other kind why not. A target passing every lab fault
// to its own header takes only the lab server's kinds.
func TargetFaults(t *target.Target) (kinds []string, why map[string]string) {
	why = map[string]string{}
	_, passThrough := t.Native[target.AllFaults]
	for _, k := range chaosplan.FaultKinds {
		if passThrough && !slices.Contains(chaosplan.StoreFaults, k) {
			why[k] = "the target passes every lab fault to its own header, and " + k + " is not one the lab's server takes"
			continue
		}
		v := k
		if chaosplan.TakesArg(k) {
			v += "=1ms"
		}
		if _, err := t.Place(v); err != nil {
			why[k] = err.Error()
			continue
		}
		kinds = append(kinds, k)
	}
	return kinds, why
}

// Bounds on the knobs the runner exposes (-replicas, -clients, -duration).
const (
	MaxReplicas = 4
	MaxClients  = 64
	MaxDuration = 10 * time.Minute
)

// CheckKnobs refuses counts and durations out of range (zero takes its
// default), naming each.
func (c Config) CheckKnobs() error {
	c = withDefaults(c)
	rangeErr := func(name string, v, lo, hi int64) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s %d outside %d..%d", name, v, lo, hi)
		}
		return nil
	}
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	return errors.Join(
		rangeErr("replicas", int64(c.Replicas), 1, MaxReplicas),
		rangeErr("clients", int64(c.Clients), 1, MaxClients),
		rangeErr("duration (ms)", ms(c.Duration), 1, ms(MaxDuration)),
		rangeErr("max attempts", int64(c.MaxAttempts), 1, 100),
		rangeErr("intent deadline (ms)", ms(c.IntentWithin), 1, ms(10*time.Minute)),
		rangeErr("attempt timeout (ms)", ms(c.AttemptTimeout), 1, ms(time.Minute)),
		rangeErr("quiet bound (ms)", ms(c.QuietWithin), 1, ms(10*time.Minute)),
		rangeErr("quiet attempts", int64(c.QuietAttempts), 1, 1000),
		rangeErr("kill interval (ms)", max(ms(c.KillEvery), 1), 1, ms(10*time.Minute)),
		rangeErr("server wait (ms)", ms(c.ServerWait), 1, ms(time.Minute)),
		rangeErr("max intents", int64(c.MaxIntents), 1, 1000000),
		rangeErr("max history", int64(c.MaxHistory), 1, 10000000),
	)
}

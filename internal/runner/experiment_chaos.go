package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"idemlab/internal/chaos"
	"idemlab/internal/evidence"
	"idemlab/internal/protocol"
	"idemlab/internal/target"
)

// ChaosFile is the chaos experiment's summary; each store's and target's
// history goes to chaosBase(name).jsonl (the audit draws its timeline).
const ChaosFile = "chaos.json"

// chaosBase is the evidence name, without extension, of the chaos run on
// a store ("chaos-durable") or of a trial on a target
// ("chaos-target-NAME" for its first, "chaos-target-NAME.trialN" for a
// later one: a target may have any name, a store's never starts with
// "target-", and no target's name holds a dot).
func chaosBase(store protocol.Store, targetName string, trial int) string {
	switch {
	case targetName == "":
		return "chaos-" + string(store)
	case trial > 1:
		return fmt.Sprintf("chaos-target-%s.trial%d", targetName, trial)
	}
	return "chaos-target-" + targetName
}

// chaosTargetFile matches the histories of chaos runs on targets.
var chaosTargetFile = regexp.MustCompile(`^chaos-target-[a-z][a-z0-9-]{0,47}(\.trial([2-9]|10))?\.jsonl$`)

// chaosFiles are the files chaos may write besides the targets' histories.
func chaosFiles() []string {
	files := []string{ChaosFile}
	for _, s := range protocol.Stores {
		files = append(files, chaosBase(s, "", 0)+".jsonl")
	}
	return files
}

// ChaosOptions are the chaos experiment's knobs (runner -duration,
// -clients, -replicas, -chaos-trials); a zero takes chaos.Config's
// default, or DefaultChaosTrials.
type ChaosOptions struct {
	Duration time.Duration // on a store; and on a target when set away from its default
	Clients  int
	Replicas int
	// Trials is how many times chaos runs on each target, each on fresh
	// state with the same seed: a target's races are its own, so what it
	// does under chaos is a rate over trials, not one roll. A store runs
	// once: the lab's own stores are held to every rule on every run.
	Trials int
}

// DefaultChaosTrials is -chaos-trials' default, and MaxChaosTrials its
// bound (each trial on a target takes about 3 s and writes a history).
const (
	DefaultChaosTrials = 3
	MaxChaosTrials     = 10
)

// trials is how many times chaos runs on each target.
func (c ChaosOptions) trials() int { return max(c.Trials, 1) }

// DefaultTargetDuration is the chaos phase on a target unless Duration is
// set away from its default (a soak): short, as a target's replicas take
// longer to restart than the lab's server.
const DefaultTargetDuration = 1500 * time.Millisecond

// targetDuration is the chaos phase on a target.
func (c ChaosOptions) targetDuration() time.Duration {
	if c.Duration != 0 && c.Duration != chaos.Defaults.Duration {
		return c.Duration
	}
	return DefaultTargetDuration
}

// config is the chaos configuration of these knobs (zero: the default).
func (c ChaosOptions) config() chaos.Config {
	return chaos.Config{Duration: c.Duration, Clients: c.Clients, Replicas: c.Replicas}
}

// runChaos runs chaos on each selected store, then in trials on each
// target, prints what each recorded, and returns chaos.json and each run's
// history. A target that cannot run is one run in chaos.json saying why.
func runChaos(ctx context.Context, inv *invocation) ([]evidence.File, error) {
	var runs []json.RawMessage
	var files []evidence.File
	run := func(on string, cfg chaos.Config, digest, dir string, trial int) error {
		res, err := chaos.Run(ctx, cfg)
		if err != nil {
			return fmt.Errorf("experiment chaos on %s: %w", on, err)
		}
		res.TargetDigest, res.TargetDir, res.Trial = digest, dir, trial
		fmt.Fprintln(inv.Stdout)
		if err := res.WriteText(inv.Stdout); err != nil {
			return err
		}
		var h bytes.Buffer
		if err := res.WriteHistory(&h); err != nil {
			return fmt.Errorf("experiment chaos on %s: history: %w", on, err)
		}
		runs = append(runs, res.JSON())
		files = append(files, evidence.File{Name: chaosBase(res.Store, res.Target, trial) + ".jsonl", Data: h.Bytes()})
		return nil
	}
	for _, s := range inv.Stores {
		if !inv.onStores() {
			break
		}
		if s.InDatabase() && inv.pg == nil {
			continue // no PostgreSQL here: said once when the run began
		}
		if err := run(string(s), inv.chaosConfig(s, nil), "", "", 0); err != nil {
			return nil, err
		}
	}
	for _, t := range inv.loaded { // the targets, when onTargets
		why, digest, err := chaosNotRun(ctx, inv, t)
		if err != nil {
			return nil, err
		}
		if why != "" {
			fmt.Fprintf(inv.Stdout, "\nchaos on target %s not run: %s\n", t.Name, why)
			runs = append(runs, chaos.NotRunJSON(t.Name, checkoutDir(inv.Root, t.Dir), why))
			continue
		}
		for trial := 1; trial <= inv.Chaos.trials(); trial++ {
			on := fmt.Sprintf("target %s (trial %d of %d)", t.Name, trial, inv.Chaos.trials())
			if err := run(on, inv.chaosConfig("", t), digest, checkoutDir(inv.Root, t.Dir), trial); err != nil {
				return nil, runFault(t, err)
			}
		}
	}
	doc, err := evidence.Marshal(struct {
		SchemaVersion int               `json:"schema_version"`
		Runs          []json.RawMessage `json:"runs"`
	}{chaos.SchemaVersion, runs})
	if err != nil {
		return nil, fmt.Errorf("experiment chaos: encode %s: %w", ChaosFile, err)
	}
	return append([]evidence.File{{Name: ChaosFile, Data: doc, Schema: "chaos.schema.json"}}, files...), nil
}

// chaosConfig is the chaos configuration of a run on store s, or on
// target t (whose chaos phase is targetDuration's).
func (inv *invocation) chaosConfig(s protocol.Store, t *target.Target) chaos.Config {
	cfg := inv.Chaos.config()
	cfg.ServerPath, cfg.Store, cfg.Target, cfg.StateRoot, cfg.Databases, cfg.Seed = inv.server.Path, s, t, inv.tmp, inv.cfg.Databases, inv.Seed
	if t != nil {
		cfg.Duration = inv.Chaos.targetDuration()
	}
	return cfg
}

// chaosNotRun says why chaos does not run on t: a program it needs is
// missing, or it counts its effects itself; "" and t's digest once its
// setup ran.
func chaosNotRun(ctx context.Context, inv *invocation, t *target.Target) (why, digest string, err error) {
	why, err = skipped(t, inv.pg != nil)
	if err != nil {
		return "", "", fmt.Errorf("chaos on %w", err)
	}
	if why != "" {
		inv.skippedNamed(t, why)
		return "skipped: " + why, "", nil
	}
	if why := chaos.NotRunnable(t); why != "" {
		return why, "", nil
	}
	if digest, err = t.Digest(); err != nil {
		return "", "", targetsFault(t, err)
	}
	if err := inv.setups.ensure(ctx, t, digest, inv.Stdout); err != nil {
		return "", "", fmt.Errorf("chaos on target %s: %w", t.Name, err)
	}
	return "", digest, nil
}

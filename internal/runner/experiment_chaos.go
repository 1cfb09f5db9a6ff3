package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"idemlab/internal/chaos"
	"idemlab/internal/evidence"
	"idemlab/internal/protocol"
)

// Chaos is the chaos experiment: clients under seeded faults and kill -9 on
// every selected store, judged from the recorded history and the journal.
const Chaos Experiment = "chaos"

// ChaosFile is the chaos experiment's summary; each store's history goes to
// chaosHistory(store).
const ChaosFile = "chaos.json"

// chaosHistory is the JSON Lines history of the chaos run on store s.
func chaosHistory(s protocol.Store) string { return "chaos-" + string(s) + ".jsonl" }

func init() {
	files := []string{ChaosFile}
	for _, s := range protocol.Stores {
		files = append(files, chaosHistory(s))
	}
	register(experiment{name: Chaos, order: 30, files: files, run: runChaos,
		check: func(o Options) error { return o.Chaos.config().CheckKnobs() }})
}

// ChaosOptions are the chaos experiment's knobs (runner -duration,
// -clients, -replicas); zero fields take chaos.Config's defaults (for a
// caller of Run: the runner's flags refuse a 0, see cmd/runner's bounds).
type ChaosOptions struct {
	Duration time.Duration
	Clients  int
	Replicas int
}

// config is the chaos configuration of these knobs (zero: the default).
func (c ChaosOptions) config() chaos.Config {
	return chaos.Config{Duration: c.Duration, Clients: c.Clients, Replicas: c.Replicas}
}

// runChaos runs the chaos experiment on each selected store in turn, prints
// each store's table, and returns chaos.json and one history per store.
func runChaos(ctx context.Context, env experimentEnv) ([]evidence.File, error) {
	var runs []json.RawMessage
	var files []evidence.File
	for _, s := range env.stores {
		if s.InDatabase() && env.databases == nil {
			continue // no PostgreSQL here: said once when the run began
		}
		cfg := env.chaos.config()
		cfg.ServerPath, cfg.Store, cfg.StateRoot, cfg.Databases, cfg.Seed = env.server, s, env.stateRoot, env.databases, env.seed
		res, err := chaos.Run(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("experiment chaos on %s: %w", s, err)
		}
		fmt.Fprintln(env.out)
		if err := res.WriteText(env.out); err != nil {
			return nil, err
		}
		var h bytes.Buffer
		if err := res.WriteHistory(&h); err != nil {
			return nil, fmt.Errorf("experiment chaos on %s: history: %w", s, err)
		}
		runs = append(runs, res.JSON())
		files = append(files, evidence.File{Name: chaosHistory(s), Data: h.Bytes()})
	}
	doc, err := evidence.Marshal(struct {
		SchemaVersion int               `json:"schema_version"`
		Runs          []json.RawMessage `json:"runs"`
	}{1, runs})
	if err != nil {
		return nil, fmt.Errorf("experiment chaos: encode %s: %w", ChaosFile, err)
	}
	return append([]evidence.File{{Name: ChaosFile, Data: doc, Schema: "chaos.schema.json"}}, files...), nil
}

package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"idemlab/internal/evidence"
	"idemlab/internal/jitter"
	"idemlab/internal/retries"
)

// Experiment names, in the order a plain run runs them.
const (
	ExperimentRetries = "retries"
	ExperimentJitter  = "jitter"
)

// Experiments lists every experiment, in run order.
var Experiments = []string{ExperimentRetries, ExperimentJitter}

// NoExperiment as the -experiment value runs the cases and no experiment.
const NoExperiment = "none"

// experimentFiles are the evidence files each experiment writes.
var experimentFiles = []string{"retries.json", "jitter.json", "jitter.svg"}

// checkExperiment refuses an unknown -experiment name, listing the valid ones.
func checkExperiment(name string) error {
	if name == "" || name == NoExperiment || slices.Contains(Experiments, name) {
		return nil
	}
	return &UsageError{fmt.Errorf("-experiment %q: no such experiment; experiments are: %s (or %s: cases only)", name, strings.Join(Experiments, ", "), NoExperiment)}
}

// runExperiment runs one experiment, prints its table and returns its
// evidence files.
func runExperiment(ctx context.Context, name string, o Options, server, stateRoot string) ([]evidence.File, error) {
	switch name {
	case ExperimentRetries:
		p := retries.Default
		if o.Intents > 0 {
			p.Intents = o.Intents
		}
		res, err := retries.Run(ctx, retries.Config{ServerPath: server, StateRoot: stateRoot, Seed: o.Seed, Parameters: p})
		if err != nil {
			return nil, fmt.Errorf("experiment retries: %w", err)
		}
		fmt.Fprintf(o.Stdout, "\nretries (seed %d, %d intents per row)\n", o.Seed, p.Intents)
		if err := res.WriteText(o.Stdout); err != nil {
			return nil, err
		}
		return []evidence.File{{Name: "retries.json", Data: res.JSON(), Schema: "retries.schema.json"}}, nil
	case ExperimentJitter:
		res, err := jitter.Run(jitter.Default)
		if err != nil {
			return nil, fmt.Errorf("experiment jitter: %w", err)
		}
		fmt.Fprintf(o.Stdout, "\njitter (%d clients × %d retries, seed %d): retries in the busiest %d ms\n", res.Parameters.Clients, res.Parameters.Retries, res.Parameters.Seed, res.Parameters.BucketMS)
		for _, s := range res.Strategies {
			fmt.Fprintf(o.Stdout, "  %-13s peak %4d\n", s.Name, s.Peak)
		}
		return []evidence.File{
			{Name: "jitter.json", Data: res.JSON(), Schema: "jitter.schema.json"},
			{Name: "jitter.svg", Data: jitter.SVG(res)},
		}, nil
	default:
		return nil, checkExperiment(name)
	}
}

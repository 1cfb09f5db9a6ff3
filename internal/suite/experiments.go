package suite

import (
	"context"
	"fmt"
	"io"
	"strings"

	"idemlab/internal/evidence"
	"idemlab/internal/jitter"
	"idemlab/internal/retries"
)

// An Experiment names one of the lab's experiments (runner -experiment).
type Experiment string

// The experiments, and None for "cases only".
const (
	Retries Experiment = "retries"
	Jitter  Experiment = "jitter"
	// None as the -experiment value runs the cases and no experiment.
	None Experiment = "none"
)

// An experiment is one entry of the experiments table: its name, the
// evidence files it writes, and how to run it.
type experiment struct {
	name  Experiment
	files []string
	run   func(ctx context.Context, env experimentEnv) ([]evidence.File, error)
}

// experimentEnv is what an experiment runs with.
type experimentEnv struct {
	server    string // the effectserver binary
	stateRoot string // a folder for state folders
	seed      uint64
	intents   int
	out       io.Writer // where its table is printed
}

// experiments is every experiment, in the order a plain run runs them.
var experiments = []experiment{
	{Retries, []string{"retries.json"}, runRetries},
	{Jitter, []string{"jitter.json", "jitter.svg"}, runJitter},
}

// Experiments lists every experiment's name, in run order.
func Experiments() []Experiment {
	names := make([]Experiment, len(experiments))
	for i, e := range experiments {
		names[i] = e.name
	}
	return names
}

// ParseExperiment returns the experiment called name (or None), or a usage
// error listing the names.
func ParseExperiment(name string) (Experiment, error) {
	if Experiment(name) == None {
		return None, nil
	}
	if _, ok := lookupExperiment(Experiment(name)); ok {
		return Experiment(name), nil
	}
	names := make([]string, len(experiments))
	for i, e := range experiments {
		names[i] = string(e.name)
	}
	return "", &UsageError{fmt.Errorf("unknown experiment %q (want one of %s, or %s: cases only)", name, strings.Join(names, ", "), None)}
}

func lookupExperiment(name Experiment) (experiment, bool) {
	for _, e := range experiments {
		if e.name == name {
			return e, true
		}
	}
	return experiment{}, false
}

// experimentFiles lists every file any experiment writes.
func experimentFiles() []string {
	var names []string
	for _, e := range experiments {
		names = append(names, e.files...)
	}
	return names
}

// runRetries runs the retries experiment and prints its table.
func runRetries(ctx context.Context, env experimentEnv) ([]evidence.File, error) {
	p := retries.Default
	p.Intents = env.intents
	res, err := retries.Run(ctx, retries.Config{ServerPath: env.server, StateRoot: env.stateRoot, Seed: env.seed, Parameters: p})
	if err != nil {
		return nil, fmt.Errorf("experiment retries: %w", err)
	}
	fmt.Fprintln(env.out)
	if err := res.WriteText(env.out); err != nil {
		return nil, err
	}
	return []evidence.File{{Name: "retries.json", Data: res.JSON(), Schema: "retries.schema.json"}}, nil
}

// runJitter runs the jitter model and prints its peaks.
func runJitter(_ context.Context, env experimentEnv) ([]evidence.File, error) {
	res, err := jitter.Run(jitter.Default)
	if err != nil {
		return nil, fmt.Errorf("experiment jitter: %w", err)
	}
	fmt.Fprintf(env.out, "\njitter (%d clients × %d retries, seed %d): retries in the busiest %d ms\n", res.Parameters.Clients, res.Parameters.Retries, res.Parameters.Seed, res.Parameters.BucketMS)
	for _, s := range res.Strategies {
		fmt.Fprintf(env.out, "  %-13s peak %4d\n", s.Name, s.Peak)
	}
	return []evidence.File{
		{Name: "jitter.json", Data: res.JSON(), Schema: "jitter.schema.json"},
		{Name: "jitter.svg", Data: jitter.SVG(res)},
	}, nil
}

package runner

import (
	"context"
	"fmt"
	"regexp"
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
	Chaos   Experiment = "chaos" // clients under seeded faults and kill -9, each run's history recorded
	// None as the -experiment value runs the cases and no experiment.
	None Experiment = "none"
)

// An experiment is one entry of the experiments table: its name, the
// evidence files it writes, how to check its knobs and how to run it.
type experiment struct {
	name     Experiment
	files    []string
	patterns []*regexp.Regexp // the files whose names depend on the run (a target's)
	// check, when set, refuses the experiment's knobs in o, naming the knob.
	check func(o Options) error
	// run runs the experiment once the server is ready, printing what it
	// observed, and returns its evidence files.
	run func(ctx context.Context, inv *invocation) ([]evidence.File, error)
}

// experiments is every experiment, in the order a plain run runs them.
var experiments = []experiment{
	{name: Retries, files: []string{"retries.json"}, run: runRetries,
		check: func(o Options) error { return retriesParameters(o.Retries, o.Intents).Check() }},
	{name: Jitter, files: []string{"jitter.json"}, run: runJitter},
	{name: Chaos, files: chaosFiles(), patterns: []*regexp.Regexp{chaosTargetFile}, run: runChaos,
		check: func(o Options) error { return o.Chaos.config().CheckKnobs() }},
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

// retriesParameters are the knobs the experiment runs with: p, or
// retries.Default when p is zero, with intents as its Intents.
func retriesParameters(p retries.Parameters, intents int) retries.Parameters {
	if p == (retries.Parameters{}) {
		p = retries.Default
	}
	p.Intents = intents
	return p
}

// runRetries runs the retries experiment and prints its table.
func runRetries(ctx context.Context, inv *invocation) ([]evidence.File, error) {
	p := retriesParameters(inv.Retries, inv.Intents)
	res, err := retries.Run(ctx, retries.Config{ServerPath: inv.server.Path, StateRoot: inv.tmp, Seed: inv.Seed, Parameters: p})
	if err != nil {
		return nil, fmt.Errorf("experiment retries: %w", err)
	}
	fmt.Fprintln(inv.Stdout)
	if err := res.WriteText(inv.Stdout); err != nil {
		return nil, err
	}
	return []evidence.File{{Name: "retries.json", Data: res.JSON(), Schema: "retries.schema.json"}}, nil
}

// runJitter runs the jitter model and prints its peaks.
func runJitter(_ context.Context, inv *invocation) ([]evidence.File, error) {
	res, err := jitter.Run(jitter.Default)
	if err != nil {
		return nil, fmt.Errorf("experiment jitter: %w", err)
	}
	fmt.Fprintf(inv.Stdout, "\njitter (%d clients × %d retries, seed %d): retries in the busiest %d ms\n", res.Parameters.Clients, res.Parameters.Retries, res.Parameters.Seed, res.Parameters.BucketMS)
	for _, s := range res.Strategies {
		fmt.Fprintf(inv.Stdout, "  %-13s peak %4d\n", s.Name, s.Peak)
	}
	return []evidence.File{{Name: "jitter.json", Data: res.JSON(), Schema: "jitter.schema.json"}}, nil
}

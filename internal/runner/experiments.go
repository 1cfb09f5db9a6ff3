package runner

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"idemlab/internal/evidence"
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
// evidence files it writes, how to check its knobs and how to run it
// (experiment_NAME.go).
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

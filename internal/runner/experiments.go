package runner

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"idemlab/internal/evidence"
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

// An experiment is one entry of the experiments table: its name, its place
// in a plain run, the evidence files it writes, how to check its knobs
// and how to run it. Each experiment registers itself from its own file
// (experiment_NAME.go).
type experiment struct {
	name  Experiment
	order int // a plain run runs experiments by ascending order
	files []string
	// patterns match the evidence files whose names depend on the run
	// (a target's), beyond files.
	patterns []*regexp.Regexp
	// check, when set, refuses the experiment's knobs in o before anything
	// is built or run; its error names the knob and becomes a usage error.
	check func(o Options) error
	// run runs the experiment in a run whose server is ready, printing
	// what it observed, and returns its evidence files.
	run func(ctx context.Context, inv *invocation) ([]evidence.File, error)
}

// experiments is every registered experiment, in the order a plain run
// runs them.
var experiments []experiment

// register adds e to the experiments; a second experiment of one name or
// one order, or a file two experiments write, is a programmer error.
func register(e experiment) {
	for _, known := range experiments {
		if known.name == e.name || known.order == e.order {
			panic(fmt.Sprintf("runner: experiment %s registered twice (or at the order of %s)", e.name, known.name))
		}
		for _, f := range e.files {
			if slices.Contains(known.files, f) {
				panic(fmt.Sprintf("runner: experiments %s and %s both write %s", known.name, e.name, f))
			}
		}
	}
	experiments = append(experiments, e)
	slices.SortFunc(experiments, func(a, b experiment) int { return a.order - b.order })
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

// experimentFiles lists every file any experiment writes, and the
// patterns of those whose names depend on the run.
func experimentFiles() ([]string, []*regexp.Regexp) {
	var names []string
	var patterns []*regexp.Regexp
	for _, e := range experiments {
		names = append(names, e.files...)
		patterns = append(patterns, e.patterns...)
	}
	return names, patterns
}

package runner

import (
	"maps"
	"testing"
	"time"

	"idemlab/internal/retries"
)

// Ensure the manifest records exactly the knobs a run set away from their
// defaults, and only those of the experiments it ran, and the trials of
// every run on targets.
func TestRecordedFlags(t *testing.T) {
	defaults := Options{Seed: 1, Intents: DefaultIntents, Retries: retries.Default}
	changed := defaults
	changed.Seed, changed.Intents, changed.Chaos = 7, 100, ChaosOptions{Duration: time.Second, Replicas: 3}
	changed.Retries.DropPercent = 0
	for _, tc := range []struct {
		name      string
		o         Options
		run       []Experiment
		onTargets bool // cases on targets
		chaosOn   bool // chaos on targets
		want      map[string]string
	}{
		{"defaults", defaults, Experiments(), false, false, map[string]string{}},
		{"zero options are the defaults", Options{Seed: 1, Intents: DefaultIntents}, Experiments(), false, false, map[string]string{}},
		{"cases on targets: one trial, recorded", defaults, nil, true, false, map[string]string{"trials": "1"}},
		{"cases on targets: the trials", Options{Trials: 10}, nil, true, false, map[string]string{"trials": "10"}},
		{"trials, no target: not recorded", Options{Trials: 10}, nil, false, false, map[string]string{}},
		{"chaos knobs at their defaults, given", func() Options {
			o := defaults
			o.Chaos = ChaosOptions{Duration: 3 * time.Second, Clients: 8, Replicas: 2}
			return o
		}(), []Experiment{Chaos}, false, false, map[string]string{}},
		{"every experiment", changed, Experiments(), false, false, map[string]string{"seed": "7", "intents": "100", "drop-percent": "0", "duration": "1s", "replicas": "3"}},
		{"chaos only", changed, []Experiment{Chaos}, false, false, map[string]string{"seed": "7", "duration": "1s", "replicas": "3"}},
		{"retries only", changed, []Experiment{Retries}, false, false, map[string]string{"seed": "7", "intents": "100", "drop-percent": "0"}},
		{"jitter only: no knob", changed, []Experiment{Jitter}, false, false, map[string]string{}},
		{"cases only", changed, nil, false, false, map[string]string{}},
		{"chaos on targets: its trials, recorded", defaults, []Experiment{Chaos}, false, true, map[string]string{"chaos-trials": "1"}},
		{"chaos on targets: -chaos-trials", Options{Seed: 1, Intents: DefaultIntents, Chaos: ChaosOptions{Trials: 3}}, []Experiment{Chaos}, true, true, map[string]string{"trials": "1", "chaos-trials": "3"}},
		{"targets, no chaos: no chaos trials", Options{Chaos: ChaosOptions{Trials: 3}}, nil, true, true, map[string]string{"trials": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.RecordedFlags(tc.run, tc.onTargets, tc.chaosOn); !maps.Equal(got, tc.want) {
				t.Fatalf("RecordedFlags = %v, want %v", got, tc.want)
			}
		})
	}
}

package runner

import (
	"maps"
	"testing"
	"time"

	"idemlab/internal/retries"
)

// Ensure the manifest records exactly the knobs a run set away from their
// defaults, and only those of the experiments it ran.
func TestRecordedFlags(t *testing.T) {
	defaults := Options{Seed: 1, Intents: DefaultIntents, Retries: retries.Default}
	changed := defaults
	changed.Seed, changed.Intents, changed.Chaos = 7, 100, ChaosOptions{Duration: time.Second, Replicas: 3}
	changed.Retries.DropPercent = 0
	for _, tc := range []struct {
		name string
		o    Options
		run  []Experiment
		want map[string]string
	}{
		{"defaults", defaults, Experiments(), map[string]string{}},
		{"zero options are the defaults", Options{Seed: 1, Intents: DefaultIntents}, Experiments(), map[string]string{}},
		{"chaos knobs at their defaults, given", func() Options {
			o := defaults
			o.Chaos = ChaosOptions{Duration: 3 * time.Second, Clients: 8, Replicas: 2}
			return o
		}(), []Experiment{Chaos}, map[string]string{}},
		{"every experiment", changed, Experiments(), map[string]string{"seed": "7", "intents": "100", "drop-percent": "0", "duration": "1s", "replicas": "3"}},
		{"chaos only", changed, []Experiment{Chaos}, map[string]string{"seed": "7", "duration": "1s", "replicas": "3"}},
		{"retries only", changed, []Experiment{Retries}, map[string]string{"seed": "7", "intents": "100", "drop-percent": "0"}},
		{"jitter only: no knob", changed, []Experiment{Jitter}, map[string]string{}},
		{"cases only", changed, nil, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.RecordedFlags(tc.run); !maps.Equal(got, tc.want) {
				t.Fatalf("RecordedFlags = %v, want %v", got, tc.want)
			}
		})
	}
}

package runner

import (
	"slices"
	"strconv"
	"time"

	"idemlab/internal/chaos"
	"idemlab/internal/retries"
)

// A knob is one runner flag that changes an experiment's parameters: its
// name (cmd/runner's flag, no dash), the experiments it changes, and its
// value in o as the flag takes it, beside its default's.
type knob struct {
	flag        string
	experiments []Experiment
	value       func(o Options) (value, def string)
}

// knobs are every flag the manifest records when set away from its default
// (manifest.flags): the audit pins each experiment parameter to its default
// unless one of these changed it, and audit -reproduce passes them again.
// No other flag is recorded (never -out or -pg-dsn, whose DSN may hold a
// password): the selection, the mutation and the targets have fields of
// their own.
var knobs = []knob{
	{"seed", []Experiment{Retries, Chaos}, func(o Options) (string, string) {
		return strconv.FormatUint(o.Seed, 10), "1"
	}},
	{"intents", []Experiment{Retries}, func(o Options) (string, string) {
		return strconv.Itoa(o.Intents), strconv.Itoa(DefaultIntents)
	}},
	{"drop-percent", []Experiment{Retries}, retriesKnob(func(p retries.Parameters) int { return p.DropPercent })},
	{"timeout-ms", []Experiment{Retries}, retriesKnob(func(p retries.Parameters) int { return p.ClientTimeoutMS })},
	{"attempts", []Experiment{Retries}, retriesKnob(func(p retries.Parameters) int { return p.MaxAttempts })},
	{"workers", []Experiment{Retries}, retriesKnob(func(p retries.Parameters) int { return p.Workers })},
	{"deadline-ms", []Experiment{Retries}, retriesKnob(func(p retries.Parameters) int { return p.TotalDeadlineMS })},
	{"duration", []Experiment{Chaos}, func(o Options) (string, string) {
		return orDefault(o.Chaos.Duration, chaos.Defaults.Duration).String(), chaos.Defaults.Duration.String()
	}},
	{"clients", []Experiment{Chaos}, func(o Options) (string, string) {
		return strconv.Itoa(orDefault(o.Chaos.Clients, chaos.Defaults.Clients)), strconv.Itoa(chaos.Defaults.Clients)
	}},
	{"replicas", []Experiment{Chaos}, func(o Options) (string, string) {
		return strconv.Itoa(orDefault(o.Chaos.Replicas, chaos.Defaults.Replicas)), strconv.Itoa(chaos.Defaults.Replicas)
	}},
}

// retriesKnob reads one of the retries experiment's parameters as it runs
// (retriesParameters: zero parameters are the defaults).
func retriesKnob(field func(retries.Parameters) int) func(o Options) (string, string) {
	return func(o Options) (string, string) {
		return strconv.Itoa(field(retriesParameters(o.Retries, o.Intents))), strconv.Itoa(field(retries.Default))
	}
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// RecordedFlags are the knobs of the experiments in run that o sets away
// from their defaults, by flag name, each as the flag takes it.
func (o Options) RecordedFlags(run []Experiment) map[string]string {
	out := map[string]string{}
	for _, k := range knobs {
		if !slices.ContainsFunc(k.experiments, func(e Experiment) bool { return slices.Contains(run, e) }) {
			continue
		}
		if v, def := k.value(o); v != def {
			out[k.flag] = v
		}
	}
	return out
}

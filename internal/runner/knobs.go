package runner

import (
	"cmp"
	"fmt"
	"slices"

	"idemlab/internal/chaos"
	"idemlab/internal/retries"
)

// RecordedFlags are the knobs of the experiments in run that o sets away
// from their defaults, the trials wherever the cases run on targets
// (casesOnTargets), and the chaos trials wherever chaos runs on targets
// (chaosOnTargets), by flag name (cmd/runner's, no dash), each as the flag
// takes it: the manifest records them (manifest.flags), the audit pins
// each parameter to its default unless one of them changed it (no trials
// recorded: one, evidence from before trials), and audit -reproduce
// passes them again. No other flag is recorded (never -out or -pg-dsn, whose DSN may
// hold a password): the selection, the mutation and the targets have fields
// of their own.
func (o Options) RecordedFlags(run []Experiment, casesOnTargets, chaosOnTargets bool) map[string]string {
	out := map[string]string{}
	record := func(flag string, value, def any, of ...Experiment) {
		v := fmt.Sprint(value)
		if v != fmt.Sprint(def) && slices.ContainsFunc(of, func(e Experiment) bool { return slices.Contains(run, e) }) {
			out[flag] = v
		}
	}
	p, d := retriesParameters(o.Retries, o.Intents), retries.Default
	record("seed", o.Seed, 1, Retries, Chaos)
	record("intents", o.Intents, DefaultIntents, Retries)
	record("drop-percent", p.DropPercent, d.DropPercent, Retries)
	record("timeout-ms", p.ClientTimeoutMS, d.ClientTimeoutMS, Retries)
	record("attempts", p.MaxAttempts, d.MaxAttempts, Retries)
	record("workers", p.Workers, d.Workers, Retries)
	record("deadline-ms", p.TotalDeadlineMS, d.TotalDeadlineMS, Retries)
	c := chaos.Defaults
	record("duration", cmp.Or(o.Chaos.Duration, c.Duration), c.Duration, Chaos)
	record("clients", cmp.Or(o.Chaos.Clients, c.Clients), c.Clients, Chaos)
	record("replicas", cmp.Or(o.Chaos.Replicas, c.Replicas), c.Replicas, Chaos)
	if casesOnTargets {
		out["trials"] = fmt.Sprint(o.trials())
	}
	if chaosOnTargets && slices.Contains(run, Chaos) {
		out["chaos-trials"] = fmt.Sprint(o.Chaos.trials())
	}
	return out
}

package runner

import (
	"context"
	"fmt"

	"idemlab/internal/evidence"
	"idemlab/internal/retries"
)

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

package suite

import (
	"context"
	"fmt"

	"idemlab/internal/evidence"
	"idemlab/internal/retries"
)

func init() {
	register(experiment{name: Retries, order: 10, files: []string{"retries.json"}, run: runRetries})
}

// runRetries runs the retries experiment and prints its table.
func runRetries(ctx context.Context, env experimentEnv) ([]evidence.File, error) {
	p := env.retries
	if p == (retries.Parameters{}) {
		p = retries.Default
	}
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

package runner

import (
	"context"
	"fmt"

	"idemlab/internal/evidence"
	"idemlab/internal/jitter"
)

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

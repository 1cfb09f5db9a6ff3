// Package jitter is the lab's retry-storm experiment: it runs the design's
// model (idemlab/internal/audit/stormmodel, the one copy, which the audit
// runs again to check) and renders the result as jitter.json.
package jitter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"idemlab/internal/audit/stormmodel"
)

// The model's names, from stormmodel.
type (
	Parameters = stormmodel.Parameters
	Strategy   = stormmodel.Strategy
)

// Default is the design's model.
var Default = stormmodel.Default

// Result is the model's output.
type Result struct {
	Parameters Parameters `json:"parameters"`
	Strategies []Strategy `json:"strategies"`
}

// Run computes the model for p; an error for parameters that make no model.
func Run(p Parameters) (Result, error) {
	s, err := stormmodel.Run(p)
	if err != nil {
		return Result{}, err
	}
	return Result{Parameters: p, Strategies: s}, nil
}

// JSON encodes r: indented, keys in a fixed order, each strategy's buckets
// on one line, a final newline. The same Result always gives the same bytes.
func (r Result) JSON() []byte {
	var b bytes.Buffer
	p := r.Parameters
	b.WriteString("{\n  \"schema_version\": 1,\n")
	fmt.Fprintf(&b, "  \"parameters\": {\"seed\": %d, \"clients\": %d, \"retries\": %d, \"base_ms\": %d, \"cap_ms\": %d, \"bucket_ms\": %d},\n",
		p.Seed, p.Clients, p.Retries, p.BaseMS, p.CapMS, p.BucketMS)
	b.WriteString("  \"strategies\": [")
	for i, s := range r.Strategies {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(s.Name)
		fmt.Fprintf(&b, "\n    {\"name\": %s, \"peak\": %d, \"total\": %d,\n     \"buckets\": [", name, s.Peak, s.Total)
		for j, c := range s.Buckets {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(c))
		}
		b.WriteString("]}")
	}
	b.WriteString("\n  ]\n}\n")
	return b.Bytes()
}

// Package stormmodel is the design's deterministic model of a retry storm,
// the one copy of it: the lab's internal/jitter writes its result as
// jitter.json, and the audit runs it again to check that file and to draw
// jitter.svg.
//
// Clients clients fail together at t = 0 and each retries Retries times,
// every retry failing. Before retry n+1 (n from 0) a client waits a delay;
// the retry happens at its clock, the running sum of its delays, and lands
// in bucket floor(clock / BucketMS), the float64 clock unrounded (a retry
// at 99.999… ms is in bucket 9). The strategies, in this order, with base
// BaseMS, cap CapMS and r a draw in [0, 1):
//
//	none          min(cap, base·2^n)
//	full          r·min(cap, base·2^n)
//	equal         d/2 + r·d/2, d = min(cap, base·2^n)
//	decorrelated  min(cap, base + r·(prev·3 − base)), prev the client's previous delay (base at first)
//
// One mulberry32 generator, seeded Seed, is shared by the strategies in
// that order and the clients in order; a strategy draws only when its
// formula has an r.
package stormmodel

import (
	"fmt"
	"math"
	"slices"
)

// Parameters are the model's constants; Default holds the design's.
type Parameters struct {
	Seed     uint32 `json:"seed"`      // mulberry32 seed
	Clients  int    `json:"clients"`   // clients failing together at t = 0
	Retries  int    `json:"retries"`   // retries per client, all failing
	BaseMS   int    `json:"base_ms"`   // base delay
	CapMS    int    `json:"cap_ms"`    // largest delay
	BucketMS int    `json:"bucket_ms"` // histogram bucket width
}

// Default is the design's model: 1000 clients, 5 retries each, base 100 ms,
// cap 10 000 ms, 10 ms buckets, seed 42.
var Default = Parameters{Seed: 42, Clients: 1000, Retries: 5, BaseMS: 100, CapMS: 10000, BucketMS: 10}

// Strategy names, in the order the model runs them.
const (
	None         = "none"
	Full         = "full"
	Equal        = "equal"
	Decorrelated = "decorrelated"
)

// Strategies lists the strategy names in the order the model runs them
// (the order matters: they share one generator).
var Strategies = []string{None, Full, Equal, Decorrelated}

// Strategy is one strategy's histogram.
type Strategy struct {
	Name    string `json:"name"`
	Peak    int    `json:"peak"`    // largest bucket count
	Total   int    `json:"total"`   // retries counted (Clients × Retries)
	Buckets []int  `json:"buckets"` // retries per bucket, from bucket 0 to the last non-empty one
}

// Mulberry32 is the mulberry32 generator on uint32 (all arithmetic mod
// 2^32, the multiplications 32-bit like JavaScript's Math.imul).
type Mulberry32 struct{ a uint32 }

// NewMulberry32 returns a generator seeded with seed.
func NewMulberry32(seed uint32) *Mulberry32 { return &Mulberry32{a: seed} }

// Float64 returns the next draw in [0, 1).
func (g *Mulberry32) Float64() float64 {
	g.a += 0x6D2B79F5
	a := g.a
	t := (a ^ a>>15) * (1 | a)
	t = (t + (t^t>>7)*(61|t)) ^ t
	return float64(t^t>>14) / (1 << 32)
}

// Run computes the model for p, one Strategy per name of Strategies. It
// returns an error for parameters that make no model (non-positive counts
// or widths, cap below base).
func Run(p Parameters) ([]Strategy, error) {
	switch {
	case p.Clients < 1, p.Retries < 1:
		return nil, fmt.Errorf("jitter: clients (%d) and retries (%d) must be at least 1", p.Clients, p.Retries)
	case p.BaseMS < 1, p.BucketMS < 1:
		return nil, fmt.Errorf("jitter: base_ms (%d) and bucket_ms (%d) must be at least 1", p.BaseMS, p.BucketMS)
	case p.CapMS < p.BaseMS:
		return nil, fmt.Errorf("jitter: cap_ms (%d) is below base_ms (%d)", p.CapMS, p.BaseMS)
	}
	g := NewMulberry32(p.Seed)
	out := make([]Strategy, 0, len(Strategies))
	for _, name := range Strategies {
		out = append(out, simulate(name, p, g))
	}
	return out, nil
}

// simulate runs one strategy, drawing from the shared generator g.
func simulate(name string, p Parameters, g *Mulberry32) Strategy {
	base, ceil := float64(p.BaseMS), float64(p.CapMS)
	s := Strategy{Name: name}
	for range p.Clients {
		clock, prev := 0.0, base
		for n := range p.Retries {
			exp := math.Min(ceil, base*math.Pow(2, float64(n)))
			var d float64
			switch name {
			case None:
				d = exp
			case Full:
				d = g.Float64() * exp
			case Equal:
				d = exp/2 + g.Float64()*exp/2
			case Decorrelated:
				d = math.Min(ceil, base+g.Float64()*(prev*3-base))
				prev = d
			}
			clock += d
			b := int(math.Floor(clock / float64(p.BucketMS)))
			for len(s.Buckets) <= b {
				s.Buckets = append(s.Buckets, 0)
			}
			s.Buckets[b]++
		}
	}
	// Every retry lands in one bucket; Run's bounds make at least one.
	s.Total, s.Peak = p.Clients*p.Retries, slices.Max(s.Buckets)
	return s
}

package jitter

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"testing"

	"idemlab/internal/audit/stormmodel"
)

// Ensure the generator matches mulberry32 as JavaScript computes it. The
// expected values were computed independently (Python, with an explicit
// 32-bit imul) for seed 42 and seed 0.
func TestMulberry32(t *testing.T) {
	tests := []struct {
		seed uint32
		want []float64
	}{
		{42, []float64{0.6011037519201636, 0.44829055899754167, 0.8524657934904099, 0.6697340414393693, 0.17481389874592423}},
		{0, []float64{0.26642920868471265, 0.0003297457005828619, 0.2232720274478197}},
	}
	for _, tt := range tests {
		g := stormmodel.NewMulberry32(tt.seed)
		for i, want := range tt.want {
			if got := g.Float64(); got != want {
				t.Errorf("seed %d draw %d: Float64() = %v, want %v", tt.seed, i, got, want)
			}
		}
	}
}

// Ensure every draw is in [0, 1).
func TestMulberry32Range(t *testing.T) {
	g := stormmodel.NewMulberry32(7)
	for i := range 100000 {
		if r := g.Float64(); r < 0 || r >= 1 {
			t.Fatalf("draw %d = %v, outside [0, 1)", i, r)
		}
	}
}

// Ensure the four peaks and totals of the design's model stay what they
// are; the peaks were also computed independently (Python).
func TestRunDefault(t *testing.T) {
	r, err := Run(Default)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name          string
		peak, buckets int
	}{
		{stormmodel.None, 1000, 311},
		{stormmodel.Full, 157, 287},
		{stormmodel.Equal, 214, 296},
		{stormmodel.Decorrelated, 73, 1841},
	}
	if got, want := len(r.Strategies), len(want); got != want {
		t.Fatalf("len(Strategies) = %d, want %d", got, want)
	}
	for i, w := range want {
		s := r.Strategies[i]
		if s.Name != w.name || s.Peak != w.peak || s.Total != 5000 || len(s.Buckets) != w.buckets {
			t.Errorf("Strategies[%d] = %s peak %d total %d buckets %d, want %s peak %d total 5000 buckets %d",
				i, s.Name, s.Peak, s.Total, len(s.Buckets), w.name, w.peak, w.buckets)
		}
		sum, peak := 0, 0
		for _, c := range s.Buckets {
			sum += c
			peak = max(peak, c)
		}
		if sum != s.Total || peak != s.Peak || s.Buckets[len(s.Buckets)-1] == 0 {
			t.Errorf("%s: buckets sum %d, max %d, last %d; want sum = total %d, max = peak %d, last non-zero",
				s.Name, sum, peak, s.Buckets[len(s.Buckets)-1], s.Total, s.Peak)
		}
	}
	// Without jitter every client retries at 100, 300, 700, 1500, 3100 ms.
	none := r.Strategies[0].Buckets
	for _, b := range []int{10, 30, 70, 150, 310} {
		if none[b] != 1000 {
			t.Errorf("none: bucket %d = %d, want 1000", b, none[b])
		}
	}
}

// Ensure the bucket rule on the float clock: floor(t / bucket), so a
// retry just before a bucket edge stays in the bucket below.
func TestBucketEdge(t *testing.T) {
	p := Parameters{Seed: 1, Clients: 1, Retries: 1, BaseMS: 100, CapMS: 100, BucketMS: 10}
	r, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	// none: the one retry at exactly 100 ms is in bucket 10.
	if got, want := r.Strategies[0].Buckets, append(make([]int, 10), 1); !slices.Equal(got, want) {
		t.Errorf("none buckets = %v, want %v", got, want)
	}
	// full: the strategy draws the second value of seed 1 (none draws
	// nothing, so full gets the first); the retry is at r·100 ms.
	g := stormmodel.NewMulberry32(1)
	want := int(math.Floor(g.Float64() * 100 / 10))
	if got := len(r.Strategies[1].Buckets) - 1; got != want {
		t.Errorf("full: retry in bucket %d, want %d", got, want)
	}
}

// Ensure parameters that make no model are refused.
func TestRunRefuses(t *testing.T) {
	tests := []struct {
		name string
		edit func(p *Parameters)
	}{
		{"no clients", func(p *Parameters) { p.Clients = 0 }},
		{"no retries", func(p *Parameters) { p.Retries = 0 }},
		{"no bucket width", func(p *Parameters) { p.BucketMS = 0 }},
		{"no base", func(p *Parameters) { p.BaseMS = 0 }},
		{"cap below base", func(p *Parameters) { p.CapMS = 50 }},
	}
	for _, tt := range tests {
		p := Default
		tt.edit(&p)
		if _, err := Run(p); err == nil {
			t.Errorf("%s: Run() error = nil, want an error", tt.name)
		}
	}
}

// Ensure the JSON is byte-identical run to run, and that the
// JSON decodes back to the result.
func TestDeterministicBytes(t *testing.T) {
	a, err := Run(Default)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(Default)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.JSON(), b.JSON()) {
		t.Error("JSON() differs between two runs")
	}
	var back struct {
		SchemaVersion int        `json:"schema_version"`
		Parameters    Parameters `json:"parameters"`
		Strategies    []Strategy `json:"strategies"`
	}
	dec := json.NewDecoder(bytes.NewReader(a.JSON()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("decode JSON(): %v", err)
	}
	if back.SchemaVersion != 1 || back.Parameters != a.Parameters || len(back.Strategies) != 4 {
		t.Fatalf("decoded JSON() = version %d, %+v, %d strategies", back.SchemaVersion, back.Parameters, len(back.Strategies))
	}
	for i, s := range back.Strategies {
		w := a.Strategies[i]
		if s.Name != w.Name || s.Peak != w.Peak || s.Total != w.Total || !slices.Equal(s.Buckets, w.Buckets) {
			t.Errorf("decoded strategy %d (%s) differs from the result", i, s.Name)
		}
	}
}

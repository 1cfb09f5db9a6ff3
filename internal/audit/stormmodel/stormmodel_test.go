package stormmodel

import "testing"

// Ensure the model gives the design's numbers. The peaks and bucket counts
// were computed independently (Python, explicit 32-bit multiplies).
func TestRunDefault(t *testing.T) {
	got, err := Run(Default)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ peak, total, buckets int }{
		{1000, 5000, 311}, {157, 5000, 287}, {214, 5000, 296}, {73, 5000, 1841},
	}
	for i, w := range want {
		if g := got[i]; g.Name != Strategies[i] || g.Peak != w.peak || g.Total != w.total || len(g.Buckets) != w.buckets {
			t.Errorf("Run(Default)[%d] = %s peak %d total %d buckets %d, want %s %d %d %d",
				i, g.Name, g.Peak, g.Total, len(g.Buckets), Strategies[i], w.peak, w.total, w.buckets)
		}
	}
}

// Ensure mulberry32 matches JavaScript's (values from Python).
func TestMulberry32(t *testing.T) {
	g := NewMulberry32(42)
	for i, want := range []float64{0.6011037519201636, 0.44829055899754167, 0.8524657934904099} {
		if got := g.Float64(); got != want {
			t.Errorf("NewMulberry32(42) draw %d = %v, want %v", i, got, want)
		}
	}
}

package jitter

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// specDir holds the jitter files of the specification corpus, which the
// audit's own model (internal/audit/experiments.go) must give too, and
// the drawing the audit makes of it; see testdata/spec/README.md.
const specDir = "../../testdata/spec/jitter"

// Ensure the design's model renders to the corpus jitter.json byte for
// byte.
func TestSpecFiles(t *testing.T) {
	r, err := Run(Default)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		got  []byte
	}{
		{"jitter.json", r.JSON()},
	} {
		want, err := os.ReadFile(filepath.Join(specDir, tt.name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tt.got, want) {
			i := 0
			for i < min(len(want), len(tt.got)) && want[i] == tt.got[i] {
				i++
			}
			t.Errorf("%s: the model's rendering differs from %s from byte %d (%d bytes, want %d)", tt.name, specDir, i, len(tt.got), len(want))
		}
	}
}

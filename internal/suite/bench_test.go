package suite

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"idemlab/internal/caseplan"
	"idemlab/internal/labrun"
)

// BenchmarkSuite measures the wall time of running every case on the
// volatile store, excluding the build: one op is the whole suite, its
// servers started and stopped, as the runner does it.
//
//	go test -run XXX -bench Suite -benchtime 5x ./internal/suite
func BenchmarkSuite(b *testing.B) {
	dir := b.TempDir()
	server := filepath.Join(dir, "effectserver")
	if err := goBuild(context.Background(), "../..", server, "./cmd/effectserver"); err != nil {
		b.Fatal(err)
	}
	cases, err := caseplan.LoadDir("../../cases", mustSchemas(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg := labrun.Config{ServerPath: server, StateRoot: dir, Protocol: labrun.DefaultProtocol}
	for b.Loop() {
		results, err := runAll(context.Background(), cfg, cases, []string{"volatile"}, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range results {
			if len(r.mismatches) > 0 {
				b.Fatalf("%s on %s: %v", r.c.Name, r.store, r.mismatches)
			}
		}
	}
}

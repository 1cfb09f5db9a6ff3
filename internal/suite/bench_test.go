package suite

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/caseplan"
	"idemlab/internal/labrun"
)

// BenchmarkSuite measures the wall time of running every case on one store
// and on all stores, excluding the build: one op is the whole suite, its
// servers started and stopped, as the runner does it.
//
//	go test -run XXX -bench Suite -benchtime 1x -count 5 ./internal/suite
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
	for _, stores := range append(singles(labrun.Stores), labrun.Stores) {
		b.Run(strings.Join(stores, "+"), func(b *testing.B) {
			for b.Loop() {
				results, err := runAll(context.Background(), cfg, cases, stores, io.Discard)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range results {
					if len(r.mismatches) > 0 {
						b.Fatalf("%s on %s: %v", r.c.Name, r.store, r.mismatches)
					}
				}
			}
		})
	}
}

// singles turns each store into a one-store selection.
func singles(stores []string) [][]string {
	var out [][]string
	for _, s := range stores {
		out = append(out, []string{s})
	}
	return out
}

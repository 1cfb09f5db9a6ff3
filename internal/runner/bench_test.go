package runner

import (
	"context"
	"idemlab/internal/audit/shard"
	"io"
	"strings"
	"testing"

	"idemlab/internal/casefile"
	"idemlab/internal/caserun"
	"idemlab/internal/protocol"
)

// BenchmarkSuite measures the wall time of running every case on one store
// and on all stores, excluding the build: one op is the whole suite, its
// servers started and stopped, as the runner does it.
//
//	go test -run XXX -bench Suite -benchtime 1x -count 5 ./internal/runner
func BenchmarkSuite(b *testing.B) {
	dir := b.TempDir()
	server, err := build(context.Background(), Options{Root: "../.."}, "./cmd/effectserver", "")
	if err != nil {
		b.Fatal(err)
	}
	cases, err := casefile.LoadDir("../../cases", mustSchemas(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg := caserun.Config{ServerPath: server.Path, StateRoot: dir, Protocol: caserun.DefaultProtocol}
	for _, stores := range append(singles(protocol.Stores), protocol.Stores) {
		b.Run(name(stores), func(b *testing.B) {
			for b.Loop() {
				runs, err := runAll(context.Background(), cfg, storeRuns(cases, stores, shard.Slice{}), io.Discard)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range runs {
					if len(r.Obs.Calls) == 0 {
						b.Fatalf("%s on %s: no call observed", r.Case.Name, r.Store)
					}
				}
			}
		})
	}
}

// singles turns each store into a one-store selection.
func singles(stores []protocol.Store) [][]protocol.Store {
	var out [][]protocol.Store
	for _, s := range stores {
		out = append(out, []protocol.Store{s})
	}
	return out
}

// name joins the stores' names with "+".
func name(stores []protocol.Store) string {
	names := make([]string, len(stores))
	for i, s := range stores {
		names[i] = string(s)
	}
	return strings.Join(names, "+")
}

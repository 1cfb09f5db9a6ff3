package labbuild

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Measured on a 2-core AMD EPYC, go1.26.8, sources at ad38948:
//
//	Build of ./cmd/effectserver, empty GOCACHE          63.4 s (69 s CPU);
//	                                                    101 s on a busy machine
//	go build -o with every package in GOCACHE (links)   0.8-1.7 s
//	BenchmarkBuildHit/effectserver (15 MB binary)       20 ms
//	BenchmarkBuildHit/audit (5 MB binary)               10 ms
//	BenchmarkKey (effectserver, 14 files hashed)        0.8 ms
//
// A hit is go env (about 6 ms), the key, and the binary's SHA-256.
//
// Run with: go test -run '^$' -bench . ./internal/labbuild

// BenchmarkBuildHit measures a cache hit: go env, the key, and the
// binary's SHA-256. The lab's programs are built once, before the timer,
// from this checkout (a minute if GOCACHE is cold).
func BenchmarkBuildHit(b *testing.B) {
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	for _, pkg := range []string{"./cmd/effectserver", "./cmd/audit"} {
		b.Run(filepath.Base(pkg), func(b *testing.B) {
			benchHit(b, Options{Root: root, Package: pkg, CacheDir: b.TempDir(), Log: os.Stderr})
		})
	}
	b.Run("probe", func(b *testing.B) {
		benchHit(b, Options{Root: writeTree(b, probe), Package: "./cmd/probe", CacheDir: b.TempDir()})
	})
}

func benchHit(b *testing.B, o Options) {
	ctx := context.Background()
	if _, err := Build(ctx, o); err != nil {
		b.Fatal(err)
	}
	o.Log = nil
	for b.Loop() {
		bin, err := Build(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		if bin.Built {
			b.Fatal("cache miss")
		}
	}
}

// BenchmarkKey measures the key alone, without the go command: reading and
// hashing the sources the program depends on.
func BenchmarkKey(b *testing.B) {
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := keyInputs(root, "./cmd/effectserver", keyGoEnv); err != nil {
			b.Fatal(err)
		}
	}
}

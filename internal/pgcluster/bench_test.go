package pgcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"idemlab/internal/pgcluster"
	"idemlab/internal/pgcluster/pgclustertest"
)

// BenchmarkStartStop measures a whole throwaway cluster: initdb, the
// server's start (to accepting connections and holding the template), and
// its stop with the folder's removal, each reported in ms.
func BenchmarkStartStop(b *testing.B) {
	if _, err := pgcluster.FindBinDir(); err != nil {
		pgclustertest.SkipOrFail(b, err)
	}
	var initdb, ready, stop time.Duration
	for b.Loop() {
		c, err := pgcluster.Start(context.Background(), pgcluster.Options{})
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		if err := c.Stop(); err != nil {
			b.Fatal(err)
		}
		stop += time.Since(began)
		initdb += c.InitIn
		ready += c.ReadyIn
	}
	n := float64(b.N)
	b.ReportMetric(float64(initdb.Milliseconds())/n, "initdb-ms")
	b.ReportMetric(float64(ready.Milliseconds())/n, "start-ms")
	b.ReportMetric(float64(stop.Milliseconds())/n, "stop-ms")
}

// BenchmarkCreateDatabase measures a database per run: CREATE DATABASE
// from the template, then its DROP, each reported in ms.
func BenchmarkCreateDatabase(b *testing.B) {
	c := pgclustertest.ForTest(b)
	ctx := context.Background()
	var create, drop time.Duration
	i := 0
	for b.Loop() {
		i++
		name := fmt.Sprintf("bench_%d", i)
		began := time.Now()
		if _, err := c.CreateDatabase(ctx, name); err != nil {
			b.Fatal(err)
		}
		create += time.Since(began)
		began = time.Now()
		if err := c.DropDatabase(ctx, name); err != nil {
			b.Fatal(err)
		}
		drop += time.Since(began)
	}
	n := float64(b.N)
	b.ReportMetric(float64(create.Microseconds())/1000/n, "create-ms")
	b.ReportMetric(float64(drop.Microseconds())/1000/n, "drop-ms")
}

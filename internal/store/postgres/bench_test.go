package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"idemlab/internal/pgcluster"
	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/store"
)

// ceilings holds this run's PostgreSQL ceiling (req/s) per client count,
// measured before the store's sub-benchmarks, which report their ratio.
var ceilings = map[int]float64{}

// benchDB numbers the databases the benchmarks create.
var benchDB atomic.Int64

// BenchmarkPostgres measures, on one throwaway cluster (fsync and
// synchronous_commit on): PostgreSQL's own ceiling, a bare one-row INSERT
// in its own transaction per request (autocommit) from 1 and 64
// connections; then Store.Apply on distinct keys from 1 and 64 goroutines
// on one store, and from 2 replicas (stores) × 32 goroutines. Each reports
// req/s and p99 latency; Apply also its ratio to the ceiling with the same
// number of clients, and intents/commit, the mean group-commit batch
// (Stats).
//
//	go test -run XXX -bench . ./internal/store/postgres
func BenchmarkPostgres(b *testing.B) {
	c := pgclustertest.Shared(b)
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("ceiling/clients=%d", clients), func(b *testing.B) {
			dsn, drop := benchDatabase(b, c, clients)
			defer drop()
			pool, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			if _, err := pool.Exec(context.Background(), `CREATE TABLE bench (id bigint PRIMARY KEY)`); err != nil {
				b.Fatal(err)
			}
			rate := measure(b, clients, func(_, i int) error {
				_, err := pool.Exec(context.Background(), `INSERT INTO bench (id) VALUES ($1)`, i)
				return err
			})
			ceilings[clients] = rate
		})
	}
	for _, bc := range []struct{ replicas, perReplica int }{{1, 1}, {1, 64}, {2, 32}} {
		clients := bc.replicas * bc.perReplica
		b.Run(fmt.Sprintf("apply/replicas=%d/clients=%d", bc.replicas, clients), func(b *testing.B) {
			dsn, drop := benchDatabase(b, c, bc.perReplica)
			defer drop()
			stores := make([]*Store, bc.replicas)
			for r := range stores {
				s, err := Open(context.Background(), dsn, 1<<40, 5*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				stores[r] = s
			}
			fp := store.FingerprintOf([]byte("add-one"))
			rate := measure(b, clients, func(client, i int) error {
				_, err := stores[client%bc.replicas].Apply(store.Intent{Key: fmt.Sprint("k", i), Fingerprint: fp}, noHook)
				return err
			})
			if ceiling := ceilings[clients]; ceiling > 0 {
				b.ReportMetric(rate/ceiling, "of-ceiling")
			}
			var commits, intents int64
			for _, s := range stores {
				st := s.Stats()
				commits, intents = commits+st.Commits, intents+st.Intents
			}
			if commits > 0 {
				b.ReportMetric(float64(intents)/float64(commits), "intents/commit")
			}
		})
	}
}

// benchDatabase creates a fresh database whose DSN asks for a pool of
// conns connections, and returns it with a function dropping it.
func benchDatabase(b *testing.B, c *pgcluster.Cluster, conns int) (string, func()) {
	b.Helper()
	name := fmt.Sprintf("bench_%d", benchDB.Add(1))
	dsn, err := c.CreateDatabase(context.Background(), name)
	if err != nil {
		b.Fatal(err)
	}
	return dsn + fmt.Sprintf("&pool_max_conns=%d", max(conns, 4)), func() {
		if err := c.DropDatabase(context.Background(), name); err != nil {
			b.Error(err)
		}
	}
}

// measure runs b.N requests op(client, i) from clients goroutines (i counts
// requests from 1) and reports req/s and the p99 latency; it returns req/s.
func measure(b *testing.B, clients int, op func(client, i int) error) float64 {
	b.Helper()
	var next atomic.Int64
	latencies := make([][]time.Duration, clients)
	var g errgroup.Group
	b.ResetTimer()
	began := time.Now()
	for client := range clients {
		g.Go(func() error {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return nil
				}
				t := time.Now()
				if err := op(client, int(i)); err != nil {
					return err
				}
				latencies[client] = append(latencies[client], time.Since(t))
			}
		})
	}
	err := g.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(latencies...)
	slices.Sort(all)
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "req/s")
	b.ReportMetric(float64(all[(len(all)-1)*99/100].Microseconds())/1000, "p99-ms")
	return rate
}

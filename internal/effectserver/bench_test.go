// Benchmarks of the stores through the real handler over loopback HTTP,
// against the physical limits measured in the same run. Run:
//
//	go test -run XXX -bench Stores ./internal/effectserver
//	go test -run XXX -bench Postgres ./internal/store/postgres    # PostgreSQL's own ceiling beside the store's Apply
//
// BenchmarkStores measures, in one run:
//
//   - fsync: the raw rate of writing 8 bytes to a small file and fsyncing
//     it (fsync/s), the ceiling of the embedded stores;
//   - STORE/clients=1 and STORE/clients=64: keyed requests per second
//     (req/s) and the 99th percentile latency (p99_ms), each request on a
//     new key, for every store (postgres on a throwaway cluster, skipped
//     where PostgreSQL is not installed);
//   - STORE/replicas=2/clients=64: the same from 2 servers × 32 clients on
//     one shared store (durable: one SQLite file; postgres: one database).
//
// The embedded stores also report x_fsync, their rate over the fsync rate,
// and the durable and postgres stores intents/commit, the mean group-commit
// batch (over every replica). Every durable or postgres request waits for
// its own commit, which costs at least one fsync, so one client cannot beat
// the fsync rate; 64 clients can, because the store's committer puts every
// pending intent into one transaction (group commit).
package effectserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
	"idemlab/internal/store/durable"
	"idemlab/internal/store/open"
	"idemlab/internal/store/postgres"
)

// fsyncRate is the last measured raw fsync rate, per second.
var fsyncRate float64

func BenchmarkStores(b *testing.B) {
	b.Run("fsync", benchFsync)
	for _, kind := range protocol.Stores {
		for _, shape := range []struct{ replicas, clients int }{{1, 1}, {1, 64}, {2, 64}} {
			if shape.replicas > 1 && !kind.Shared() {
				continue // volatile replicas share nothing: nothing to measure
			}
			name := fmt.Sprintf("%s/clients=%d", kind, shape.clients)
			if shape.replicas > 1 {
				name = fmt.Sprintf("%s/replicas=%d/clients=%d", kind, shape.replicas, shape.clients)
			}
			b.Run(name, func(b *testing.B) { benchRequests(b, kind, shape.replicas, shape.clients) })
		}
	}
}

// benchFsync writes and fsyncs a small file in the benchmark's temp folder.
func benchFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := []byte("12345678")
	b.ResetTimer()
	for range b.N {
		if _, err := f.WriteAt(buf, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	fsyncRate = float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(fsyncRate, "fsync/s")
}

// benchRequests sends b.N keyed requests, each on its own key, from clients
// concurrent clients spread over replicas servers on one store of kind.
func benchRequests(b *testing.B, kind protocol.Store, replicas, clients int) {
	dir := b.TempDir()
	p := open.Place{Dir: dir}
	if kind.InDatabase() {
		p.DSN = pgclustertest.Database(b)
	}
	var servers []*Server
	var addrs []string
	for range replicas {
		srv, err := New(Config{
			StateDir: dir, DSN: p.DSN, Addr: protocol.DefaultAddr, Store: kind,
			Capacity: b.N + 1, MaxBody: protocol.DefaultMaxBody, Wait: protocol.DefaultWait,
		}, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		defer func() {
			hs.Close()
			srv.Close()
		}()
		servers = append(servers, srv)
		addrs = append(addrs, strings.TrimPrefix(hs.URL, "http://"))
	}
	// Each client holds one keep-alive connection (safe here: no fault
	// drops a reply) and speaks HTTP/1.1 itself, as a load generator such
	// as wrk does: the client shares the machine's two cores with the
	// server, and net/http's client would spend more of them than the
	// server does.
	var next atomic.Int64
	latencies := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	b.ResetTimer()
	for c := range clients {
		wg.Go(func() {
			cl, err := dialClient(addrs[c%replicas])
			if err != nil {
				b.Error(err)
				return
			}
			defer cl.close()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				began := time.Now()
				if err := cl.post(fmt.Sprintf("key-%d", i)); err != nil {
					b.Error(err)
					return
				}
				latencies[c] = append(latencies[c], time.Since(began))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "req/s")
	b.ReportMetric(float64(p99(latencies).Microseconds())/1000, "p99_ms")
	if fsyncRate > 0 && !kind.InDatabase() {
		b.ReportMetric(rate/fsyncRate, "x_fsync")
	}
	var commits, intents int64
	for _, srv := range servers {
		switch st := srv.store.(type) {
		case *durable.Store:
			commits, intents = commits+st.Stats().Commits, intents+st.Stats().Intents
		case *postgres.Store:
			commits, intents = commits+st.Stats().Commits, intents+st.Stats().Intents
		}
	}
	if commits > 0 {
		b.ReportMetric(float64(intents)/float64(commits), "intents/commit")
	}
}

// p99 is the 99th percentile of every client's latencies.
func p99(perClient [][]time.Duration) time.Duration {
	all := slices.Concat(perClient...)
	if len(all) == 0 {
		return 0
	}
	slices.Sort(all)
	return all[min(len(all)-1, len(all)*99/100)]
}

// benchClient is one keep-alive HTTP/1.1 connection to the server.
type benchClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialClient(addr string) (*benchClient, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &benchClient{conn: conn, r: bufio.NewReader(conn)}, nil
}

func (c *benchClient) close() { c.conn.Close() }

// post sends one keyed POST /effect and checks it was applied.
func (c *benchClient) post(key string) error {
	req := "POST " + protocol.EffectPath + " HTTP/1.1\r\nHost: bench\r\nIdempotency-Key: " + key + "\r\nContent-Length: 7\r\n\r\nadd-one"
	if _, err := io.WriteString(c.conn, req); err != nil {
		return err
	}
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK || res.Header.Get(protocol.ReplayedHeader) != "false" {
		return fmt.Errorf("key %s: %d %q replayed %q, want 200 not replayed", key, res.StatusCode, body, res.Header.Get(protocol.ReplayedHeader))
	}
	return nil
}

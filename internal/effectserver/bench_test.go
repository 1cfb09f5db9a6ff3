// Benchmarks of the durable store against the physical limit, the fsync
// rate of the disk under the state folder. Run:
//
//	go test -run XXX -bench Durable ./internal/effectserver
//
// BenchmarkDurable measures, in one run and on the same disk (the
// benchmark's temp folder, which holds the state folder):
//
//   - fsync: the raw rate of writing 8 bytes to a small file and fsyncing
//     it (fsync/s);
//   - clients=1: durable keyed requests per second (req/s) from one client
//     over loopback HTTP through the real handler, each on a new key;
//   - clients=64: the same from 64 concurrent clients on distinct keys.
//
// Each request benchmark reports x_fsync, its rate over the fsync rate
// measured just before, and intents/commit, the mean group-commit batch. Every durable request waits for its own commit, which costs at
// least one fsync, so one client cannot beat the fsync rate; 64 clients do
// because the store's committer puts every pending intent into one
// transaction (group commit: one fsync for the batch).
package effectserver

import (
	"bufio"
	"fmt"
	"idemlab/internal/durablestore"
	"idemlab/internal/protocol"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fsyncRate is the last measured raw fsync rate, per second.
var fsyncRate float64

func BenchmarkDurable(b *testing.B) {
	b.Run("fsync", benchFsync)
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchDurableRequests(b, clients) })
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

// benchDurableRequests sends b.N keyed requests, each on its own key, from
// clients concurrent clients to a durable server on loopback.
func benchDurableRequests(b *testing.B, clients int) {
	dir := b.TempDir()
	srv, err := New(Config{
		StateDir: dir,
		Addr:     protocol.DefaultAddr,
		Store:    protocol.Durable,
		Capacity: b.N + 1,
		MaxBody:  protocol.DefaultMaxBody,
		Wait:     protocol.DefaultWait,
	}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() {
		hs.Close()
		srv.Close()
	}()
	// Each client holds one keep-alive connection (safe here: no fault
	// drops a reply) and speaks HTTP/1.1 itself, as a load generator such as
	// wrk does: the client shares the machine's two cores with the server,
	// and net/http's client would spend more of them than the server does.
	addr := strings.TrimPrefix(hs.URL, "http://")
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range clients {
		wg.Go(func() {
			c, err := dialClient(addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.close()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := c.post(fmt.Sprintf("key-%d", i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "req/s")
	if fsyncRate > 0 {
		b.ReportMetric(rate/fsyncRate, "x_fsync")
	}
	if st := srv.store.(*durablestore.Store).Stats(); st.Commits > 0 {
		b.ReportMetric(float64(st.Intents)/float64(st.Commits), "intents/commit")
	}
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

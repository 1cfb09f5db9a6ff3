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
	"fmt"
	"io"
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
		Addr:     DefaultAddr,
		Store:    StoreDurable,
		Capacity: b.N + 1,
		MaxBody:  DefaultMaxBody,
		Wait:     DefaultWait,
	}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() {
		hs.Close()
		srv.Close()
	}()
	// Keep-alives are safe here: no fault ever drops a reply.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer hc.CloseIdleConnections()

	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := post(hc, hs.URL, fmt.Sprintf("key-%d", i)); err != nil {
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
	if st := srv.store.(durableStore).db.Stats(); st.Commits > 0 {
		b.ReportMetric(float64(st.Intents)/float64(st.Commits), "intents/commit")
	}
}

// post sends one keyed POST /effect and checks it was applied.
func post(hc *http.Client, url, key string) error {
	req, err := http.NewRequest(http.MethodPost, url+EffectPath, strings.NewReader("add-one"))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK || res.Header.Get(ReplayedHeader) != "false" {
		return fmt.Errorf("key %s: %d %q replayed %q, want 200 not replayed", key, res.StatusCode, body, res.Header.Get(ReplayedHeader))
	}
	return nil
}

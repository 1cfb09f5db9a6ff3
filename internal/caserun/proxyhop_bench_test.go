package caserun

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idemlab/internal/audit/strict"
	"idemlab/internal/target"
)

// BenchmarkProxyHopOnTargets measures what the fault proxy adds to a call
// on shipped targets, the cost issue 27 (item 10) measured: one process of
// each target, its effects through the lab's sink, is called by the lab's
// client (a fresh connection per call, a fresh key per call) at 1 and at 8
// concurrent clients, directly at the process's own address and through
// its proxy, in alternating rounds of 200 calls so that both paths see the
// same load. It reports each path's requests per second and median
// latency and the ratios proxied / direct (the goal: a throughput ratio of
// at least 0.83 and a p50 ratio of at most 1.2). The targets' setups must
// have run (the runner runs them: npm ci, go build); a target whose setup
// has not is a failure of the bench, not a skip. internal/proxy's
// BenchmarkProxyOverhead measures the same hop to a bare in-process
// replica, the harshest case. IDEMLAB_BENCH_TARGETS names other targets
// (comma-separated folders of targets/).
//
//	go test ./internal/caserun -run '^$' -bench ProxyHopOnTargets -benchtime 4000x -count 3
func BenchmarkProxyHopOnTargets(b *testing.B) {
	names := []string{"node-idempotency-memory", "express-idempotency", "fiber-v2-idempotency"}
	if env := os.Getenv("IDEMLAB_BENCH_TARGETS"); env != "" {
		names = strings.Split(env, ",")
	}
	set, err := strict.LoadSchemas(filepath.Join("..", "..", "schema"))
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range names {
		t, err := target.Load(filepath.Join("..", "..", "targets", name), set)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) { benchProxyHop(b, t) })
	}
}

// benchProxyHop starts one process of t behind its proxy and measures both
// paths at 1 and 8 clients.
func benchProxyHop(b *testing.B, t *target.Target) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := TargetConfig{Target: t, StateRoot: b.TempDir(), EffectServer: serverBin, ClientTimeout: time.Minute}
	tr, err := StartTargetReplicas(ctx, cfg, cfg.StateRoot, 1, nil)
	if tr != nil {
		defer tr.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	if err := tr.Start(ctx, 0); err != nil {
		b.Fatalf("%v (has the target's setup run? the runner runs it)", err)
	}
	_, addr := tr.Process(0)
	urls := [2]string{"http://" + addr + t.Request.Path, tr.URL(0)}
	var next atomic.Int64 // every call a fresh key, across both paths and rounds
	for _, conc := range []int{1, 8} {
		b.Run("clients="+strconv.Itoa(conc), func(b *testing.B) {
			c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
			defer c.CloseIdleConnections()
			const round = 200
			var lat [2][]time.Duration
			var took [2]time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				n := min(round, b.N-done)
				for path, url := range urls {
					l, d := targetRound(b, c, t, url, n, conc, &next)
					lat[path] = append(lat[path], l...)
					took[path] += d
				}
			}
			b.StopTimer()
			var rate, p50 [2]float64
			for path := range urls {
				rate[path] = float64(len(lat[path])) / took[path].Seconds()
				slices.Sort(lat[path])
				p50[path] = float64(lat[path][len(lat[path])/2].Microseconds())
			}
			b.ReportMetric(rate[0], "direct-req/s")
			b.ReportMetric(rate[1], "proxied-req/s")
			b.ReportMetric(rate[1]/rate[0], "throughput-ratio")
			b.ReportMetric(p50[0], "direct-p50-µs")
			b.ReportMetric(p50[1], "proxied-p50-µs")
			b.ReportMetric(p50[1]/p50[0], "p50-ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// targetRound makes n calls to url from conc goroutines, each with a fresh
// key in t's format, and returns each call's latency and the round's wall
// time; any reply but a 2xx fails the bench.
func targetRound(b *testing.B, c *http.Client, t *target.Target, url string, n, conc int, next *atomic.Int64) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, n)
	var i atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				k := int(i.Add(1)) - 1
				if k >= n {
					return
				}
				req, err := http.NewRequest(t.Request.Method, url, strings.NewReader("add-one"))
				if err != nil {
					b.Error(err)
					return
				}
				req.Header.Set("Content-Type", t.Request.ContentType)
				req.Header.Set(t.Request.KeyHeader, t.Request.KeyFormat.Key(fmt.Sprintf("bench-%d", next.Add(1))))
				began := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode/100 != 2 {
					b.Errorf("%s: status %d, %v", url, resp.StatusCode, err)
					return
				}
				lat[k] = time.Since(began)
			}
		})
	}
	wg.Wait()
	return lat, time.Since(start)
}

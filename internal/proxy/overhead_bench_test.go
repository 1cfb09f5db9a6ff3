package proxy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idemlab/internal/proxy"
)

// BenchmarkProxyOverhead measures, side by side in one run, what the proxy
// adds to a call: the same client (the lab's: a fresh connection per call,
// internal/client) at the same concurrency calls a small net/http replica
// directly and through a proxy without a fault, in alternating rounds so
// that both see the same load on the machine. It reports each path's
// throughput and median latency and their ratios (proxied over direct:
// throughput-ratio at least 0.83 and p50-ratio at most 1.2 is the goal of
// issue 27, item 7). A third path, the standard library's
// httputil.ReverseProxy in the same process with keep-alive to the replica,
// is the reference: what a general-purpose Go proxy hop costs on the same
// machine in the same run. A fourth, bareHop, is the yardstick: the least
// an HTTP-aware hop can do (no fault, no bound, no watch), so the gap
// between it and the direct path is what any proxy hop costs on this
// machine, whatever its code. One op is one call on each path.
//
//	go test ./internal/proxy -run '^$' -bench ProxyOverhead -benchtime 20000x -count 3
func BenchmarkProxyOverhead(b *testing.B) {
	addr := httpTarget(b, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(body) // a tiny amount of work
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, hex.EncodeToString(sum[:8]))
	})
	p, err := proxy.Start(proxy.Config{Upstream: addr, Route: noFaults, Kill: func() { b.Error("kill") }})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ref := httpTarget(b, (&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(&url.URL{Scheme: "http", Host: addr}) },
	}).ServeHTTP)
	bare := bareHop(b, addr)
	for _, conc := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", conc), func(b *testing.B) {
			c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
			defer c.CloseIdleConnections()
			const round = 500 // calls per path per round
			var lat [4][]time.Duration
			var took [4]time.Duration
			urls := [4]string{"http://" + addr + "/effect", "http://" + p.Addr() + "/effect", "http://" + ref + "/effect", "http://" + bare + "/effect"}
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				n := min(round, b.N-done)
				for path, url := range urls {
					l, d := callRound(b, c, url, n, conc)
					lat[path] = append(lat[path], l...)
					took[path] += d
				}
			}
			b.StopTimer()
			var rate, p50 [4]float64
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
			b.ReportMetric(rate[2]/rate[0], "ref-throughput-ratio")
			b.ReportMetric(p50[2]/p50[0], "ref-p50-ratio")
			b.ReportMetric(rate[3]/rate[0], "bare-throughput-ratio")
			b.ReportMetric(p50[3]/p50[0], "bare-p50-ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// callRound makes n calls to url from conc goroutines and returns each
// call's latency and the round's wall time.
func callRound(b *testing.B, c *http.Client, url string, n, conc int) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := time.Now()
				resp, err := c.Post(url, "text/plain", strings.NewReader("add-one"))
				if err != nil {
					b.Error(err)
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					b.Errorf("status %d, %v", resp.StatusCode, err)
					return
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	return lat, time.Since(start)
}

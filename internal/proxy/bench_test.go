package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"idemlab/internal/proxy"
)

// BenchmarkExchange measures one exchange through the proxy to a net/http
// replica, each on fresh connections (Connection: close), against the same
// exchange without the proxy.
func BenchmarkExchange(b *testing.B) {
	addr := httpTarget(b, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "1")
	})
	p, err := proxy.Start(proxy.Config{Upstream: addr, Route: noFaults, Kill: func() { b.Fatal("kill") }})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for _, bb := range []struct{ name, addr string }{{"direct", addr}, {"proxied", p.Addr()}} {
		b.Run(bb.name, func(b *testing.B) {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for b.Loop() {
				resp, err := c.Post("http://"+bb.addr+"/effect", "text/plain", strings.NewReader("add-one"))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

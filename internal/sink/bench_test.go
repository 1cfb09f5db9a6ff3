package sink_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"idemlab/internal/sink"
)

// BenchmarkCall measures one effect: a POST to the sink over a kept-alive
// loopback connection, journaled and answered.
func BenchmarkCall(b *testing.B) {
	s, err := sink.Start(sink.Config{Replicas: 1, Kill: func(int) { b.Fatal("kill") }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := &http.Client{}
	for b.Loop() {
		resp, err := c.Post(s.URL(0), "text/plain", strings.NewReader("add-one"))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if got := len(s.Journal()); got != b.N {
		b.Fatalf("journal has %d entries after %d calls", got, b.N)
	}
}

package client_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"idemlab/internal/client"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
)

var serverBin string

func TestMain(m *testing.M) { os.Exit(servertest.Main(m, &serverBin)) }

// Ensure a body larger than the server's -max-body gets its 413 every time,
// never a reset connection (no_reply): the server answers before reading
// the body, and the client must not be caught still writing it. Counted
// over many calls on a real effectserver, for sizes from just over the
// limit to the case schema's largest body_bytes; a body at the limit, sent
// with Expect: 100-continue too, still takes effect every time.
func TestOversizedBodyGets413EveryTime(t *testing.T) {
	if client.ExpectContinueAbove >= protocol.DefaultMaxBody {
		t.Fatalf("ExpectContinueAbove = %d: a body the lab's server refuses (over %d bytes) would be sent unasked", client.ExpectContinueAbove, protocol.DefaultMaxBody)
	}
	srv, err := serverproc.Start(context.Background(), serverBin,
		[]string{"-addr", protocol.DefaultAddr, "-store", string(protocol.Volatile), "-state", t.TempDir(),
			"-max-body", fmt.Sprint(protocol.DefaultMaxBody), "-capacity", "1000", "-faults"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	const calls = 200
	cl := client.New(protocol.DefaultClientTimeout)
	for _, tt := range []struct{ size, status int }{
		{protocol.DefaultMaxBody, 200}, {protocol.DefaultMaxBody + 1, 413}, {64 << 10, 413}, {256 << 10, 413}, {1 << 20, 413},
	} {
		size := tt.size
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			body := make([]byte, size)
			counts := map[string]int{}
			for i := range calls {
				key := fmt.Sprintf("big-%d-%d", size, i)
				rep, err := cl.Post(context.Background(), client.EffectURL(srv.Addr), client.Request{Key: &key, Body: body})
				switch {
				case err != nil:
					counts[string(client.Classify(err))]++
				default:
					counts[fmt.Sprint(rep.Status)]++
				}
			}
			if got := counts[fmt.Sprint(tt.status)]; got != calls {
				t.Errorf("%d calls with a %d-byte body: outcomes %v, want %d × %d", calls, size, counts, calls, tt.status)
			}
		})
	}
}

package caserun

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/sink"
	"idemlab/internal/sink/sinktest"
	"idemlab/internal/target"
)

// Ensure an attached target's sink_addr is listened on once for all its
// runs on a Pool, not again for each: between two runs no other socket can
// take the address (an "address already in use" there was the lab's own
// failure), and each run's effects still reach its own sink, whose journal
// holds them alone. Without a Pool a run holds the address for itself, and
// a sink_addr another socket holds is the target's fault.
func TestAttachedSinkHeld(t *testing.T) {
	t.Parallel()
	sinkAddr := sinktest.SinkAddr(t) // below the ephemeral ports: no connection takes it between the binds
	svc := sinktest.StartTarget(t, sinktest.Options{Service: sinktest.Service{Keys: sinktest.Memory}, EffectURL: "http://" + sinkAddr + "/charges"})
	tg := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.Memory})
	tg.Attach = &target.Attach{URL: "http://" + svc.Addr, Upstream: svc.Addr, SinkAddr: sinkAddr}
	cfg := TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: 10 * time.Second}
	lost := loadCase(t, "keyed_lost_reply")
	run := func(cfg TargetConfig) {
		t.Helper()
		obs, det, err := RunTarget(context.Background(), cfg, lost)
		if err != nil {
			t.Fatal(err)
		}
		if effects := sink.Effects(det.Journal); obs.Counter != 1 || len(effects) != 1 || effects[0].Seq != 1 {
			t.Fatalf("counter %d, journal %+v: want one effect of value 1 in the run's own journal", obs.Counter, det.Journal)
		}
	}
	held := func(want bool) {
		t.Helper()
		// A closed socket stays bound while a child forked that moment
		// (the package's parallel tests start processes) holds a copy:
		// free means free within relayBindWithin, as the relay waits.
		ln, err := net.Listen("tcp", sinkAddr)
		for deadline := time.Now().Add(relayBindWithin); !want && errors.Is(err, syscall.EADDRINUSE) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			ln, err = net.Listen("tcp", sinkAddr)
		}
		if err == nil {
			ln.Close()
		}
		if got := errors.Is(err, syscall.EADDRINUSE); got != want {
			t.Fatalf("listen at sink_addr between runs: %v; want the address held %v", err, want)
		}
	}

	pool := NewPool(context.Background(), cfg)
	pooled := cfg
	pooled.Pool = pool
	run(pooled)
	held(true)
	run(pooled)
	pool.Close()
	held(false)

	run(cfg) // no Pool: the run's own relay
	held(false)

	taken, err := net.Listen("tcp", sinkAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, _, err = RunTarget(context.Background(), cfg, lost)
	if _, ok := errors.AsType[*TargetFault](err); !ok {
		t.Fatalf("sink_addr held by another socket: %v; want the target's fault", err)
	}
}

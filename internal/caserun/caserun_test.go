package caserun

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
)

// serverBin is the effectserver built once for these tests.
var serverBin string

func TestMain(m *testing.M) {
	if sinktest.IsTarget() { // this binary as a target (target_test.go)
		os.Exit(sinktest.Serve())
	}
	os.Exit(servertest.Main(m, &serverBin))
}

// Ensure an interrupted run stops sending at once, reports the
// interruption instead of observations, and leaves no server behind: the
// calls it could not make are never recorded as failures of the server.
func TestInterruptedRunStopsSending(t *testing.T) {
	key := "k-{i}"
	c := casefile.Case{Name: "long", Replicas: 2, Steps: []casefile.Step{
		{Call: &casefile.Call{Key: &key, Repeat: 1000}},
	}}
	cfg := Config{ServerPath: serverBin, StateRoot: t.TempDir(), Protocol: DefaultProtocol}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	obs, _, err := Run(ctx, cfg, c, protocol.Volatile)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want an error wrapping context.Canceled", err)
	}
	if n := len(obs.Calls); n >= 1000 {
		t.Fatalf("the interrupted run recorded %d calls, want it to stop sending", n)
	}
	sinktest.CheckNoneLeft(t, "effectserver")
	entries, err := os.ReadDir(cfg.StateRoot)
	if err != nil || len(entries) != 0 {
		t.Errorf("state root after the run holds %v (%v), want nothing", entries, err)
	}
}

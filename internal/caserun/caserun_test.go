package caserun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
)

// serverBin is the effectserver built once for these tests.
var serverBin string

// TestMain also runs up to 6 parallel tests at once unless -parallel
// gives another number: they mostly wait on a lease or a client's timeout,
// and the default, GOMAXPROCS, is 2 on the lab's machine. The tests that
// check this binary's processes as a whole (sinktest.Leftovers) run
// serially, before every parallel one.
func TestMain(m *testing.M) {
	if sinktest.IsTarget() { // this binary as a target (target_test.go)
		os.Exit(sinktest.Serve())
	}
	flag.Parse()
	if f := flag.Lookup("test.parallel"); f.Value.String() == f.DefValue {
		f.Value.Set("6")
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

// Ensure a reply body is kept whole up to MaxKeptBody bytes and cut past
// it with its length and SHA-256, so that bodies kept compare as the
// whole bodies do: two 2 MiB bodies differing in their last byte differ.
func TestKeptBody(t *testing.T) {
	long := bytes.Repeat([]byte("a"), 2<<20)
	other := append(bytes.Clone(long[:len(long)-1]), 'b')
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, ""},
		{"a value", []byte("17"), "17"},
		{"at the bound", bytes.Repeat([]byte("z"), MaxKeptBody), strings.Repeat("z", MaxKeptBody)},
		{"one past", bytes.Repeat([]byte("z"), MaxKeptBody+1), strings.Repeat("z", MaxKeptBody) +
			" [body cut at 1024 bytes: 1025 in all, sha256 " + fmt.Sprintf("%x", sha256.Sum256(bytes.Repeat([]byte("z"), MaxKeptBody+1))) + "]"},
	} {
		if got := KeptBody(tc.in); got != tc.want {
			t.Errorf("%s: KeptBody = %.80q..., want %.80q...", tc.name, got, tc.want)
		}
	}
	a, b := KeptBody(long), KeptBody(other)
	if a == b || len(a) > MaxKeptBody+200 || KeptBody(bytes.Clone(long)) != a {
		t.Errorf("2 MiB bodies kept: %d and %d bytes, equal %v: want each short, different from the other, equal to itself", len(a), len(b), a == b)
	}
}

package caserun

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"idemlab/internal/client"
	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store/open"
)

// Ensure no key is stuck after its owner dies, and none applies twice at
// the ledger: three upstream processes share one store (durable folder,
// postgres database) and forward keys to one ledger; the first is killed
// (SIGKILL) while it owns eight keys, four claimed and not yet sent to the
// ledger, four applied by the ledger and not yet recorded. Within the
// lease every key gets 409 with Retry-After on the other replicas; after
// it, the two survivors race for every key, every reply is 200, and the
// ledger applied each key exactly once.
func TestTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	for _, kind := range []protocol.Store{protocol.Durable, protocol.Postgres} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel() // each on servers, folders and a database of its own; each waits out a lease
			takeoverAfterKill(t, kind)
		})
	}
}

func takeoverAfterKill(t *testing.T, kind protocol.Store) {
	const (
		lease   = 2 * time.Second
		perKind = 4
	)
	start := func(args ...string) *serverproc.Server {
		t.Helper()
		s, err := serverproc.Start(context.Background(), serverBin, append([]string{"-addr", protocol.DefaultAddr, "-faults"}, args...), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Kill)
		return s
	}
	storeArgs := []string{"-store", string(kind), "-state", t.TempDir()}
	if kind.InDatabase() {
		storeArgs = []string{"-store", string(kind), "-dsn", pgclustertest.Database(t)}
	}
	ledgerDir := t.TempDir()
	ledger := start("-store", "durable", "-state", ledgerDir)
	var ups []*serverproc.Server
	for range 3 {
		ups = append(ups, start(append(storeArgs, "-downstream", client.EffectURL(ledger.Addr), "-lease", lease.String())...))
	}
	ledgerCounter := func() int64 {
		st, err := open.ReadState(protocol.Durable, open.Place{Dir: ledgerDir})
		if err != nil {
			t.Fatal(err)
		}
		return st.Counter
	}
	lab := client.New(30 * time.Second)
	post := func(s *serverproc.Server, key, fault string) client.Reply {
		rep, err := lab.Post(context.Background(), client.EffectURL(s.Addr), client.Request{Key: &key, Fault: fault, Body: []byte(protocol.DefaultBody)})
		if err != nil {
			return client.Reply{} // status 0: no reply
		}
		return rep
	}

	// The owner: delayed keys are claimed and wait before the ledger call;
	// stalled keys are applied by the ledger and wait before the record.
	var keys []string
	var wg sync.WaitGroup
	for i := range 2 * perKind {
		key, fault := "delayed-"+strconv.Itoa(i), "delay=60000ms"
		if i >= perKind {
			key, fault = "stalled-"+strconv.Itoa(i), "stall=60000ms"
		}
		keys = append(keys, key)
		wg.Go(func() { post(ups[0], key, fault) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for ledgerCounter() < perKind {
		if time.Now().After(deadline) {
			t.Fatalf("the ledger applied %d stalled keys, want %d; owner's log:\n%s\nledger's log:\n%s", ledgerCounter(), perKind,
				strings.Join(ups[0].Log(), "\n"), strings.Join(ledger.Log(), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, key := range keys { // every claim is committed
		for rep := post(ups[1], key, ""); rep.Status != 409; rep = post(ups[1], key, "") {
			if time.Now().After(deadline) {
				t.Fatalf("%s on replica 1: %d %q, want 409 while replica 0 owns it", key, rep.Status, rep.Body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	killed := time.Now()
	ups[0].Kill() // SIGKILL while it owns every key
	wg.Wait()

	for _, key := range keys {
		rep := post(ups[2], key, "")
		if time.Since(killed) >= lease-200*time.Millisecond {
			t.Skipf("too slow to check the 409s within the lease (%v)", time.Since(killed))
		}
		if rep.Status != 409 || rep.RetryAfter < time.Second {
			t.Fatalf("%s within the lease: %d %q Retry-After %v, want 409 with Retry-After", key, rep.Status, rep.Body, rep.RetryAfter)
		}
	}
	time.Sleep(time.Until(killed.Add(lease + 200*time.Millisecond)))

	values := map[string][]string{}
	var mu sync.Mutex
	for _, key := range keys {
		for _, s := range ups[1:] {
			wg.Go(func() {
				rep := post(s, key, "")
				mu.Lock()
				defer mu.Unlock()
				values[key] = append(values[key], fmt.Sprintf("%d %s", rep.Status, rep.Body))
			})
		}
	}
	wg.Wait()
	var got []int
	for _, key := range keys {
		// The race's loser gets 409 (the winner's claim) or the recorded
		// value; a retry after it settles the key.
		final := post(ups[1], key, "")
		for final.Status == 409 && time.Now().Before(killed.Add(3*lease)) {
			time.Sleep(100 * time.Millisecond)
			final = post(ups[1], key, "")
		}
		if final.Status != 200 {
			t.Fatalf("%s after the lease: %d %q (race: %v), want 200", key, final.Status, final.Body, values[key])
		}
		for _, v := range values[key] {
			if v != "200 "+string(final.Body) && v[:3] != "409" {
				t.Fatalf("%s: replies %v, final %q: two values for one key", key, values[key], final.Body)
			}
		}
		n, _ := strconv.Atoi(string(final.Body))
		got = append(got, n)
	}
	for _, s := range append(ups[1:], ledger) {
		if code, err := s.Stop(10 * time.Second); code != 0 || err != nil {
			t.Fatalf("stop: exit %d, %v", code, err)
		}
	}
	slices.Sort(got)
	want := make([]int, len(keys))
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the keys' values = %v, want each of 1..%d once", got, len(keys))
	}
	if got, want := ledgerCounter(), int64(len(keys)); got != want {
		t.Fatalf("ledger counter = %d, want %d: every key exactly once", got, want)
	}
}

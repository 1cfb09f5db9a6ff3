package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
	"idemlab/internal/store/durable"
	"idemlab/internal/store/open"
)

func readState(t *testing.T, kind protocol.Store, dir string) store.State {
	t.Helper()
	return servertest.State(t, kind, open.Place{Dir: dir})
}

// Ensure two real servers on one -state folder, racing one key from 2×32
// concurrent clients, apply its effect once: exactly one reply is not
// replayed and every reply is 200 "1".
func TestDurableTwoProcessesOneKey(t *testing.T) {
	dir := t.TempDir()
	// Both start at once: creating the tables is part of the race.
	servers := []*server{
		startServer(t, false, "-state", dir, "-store", "durable", "-faults"),
		startServer(t, false, "-state", dir, "-store", "durable", "-faults"),
	}
	for _, s := range servers {
		s.ready()
	}

	const perServer = 32
	type reply struct {
		status         int
		body, replayed string
	}
	replies := make([]reply, 2*perServer)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replies {
		s := servers[i%2]
		wg.Go(func() {
			<-release
			// slow: each process's owner holds its key 120 ms after
			// admission, so both owners reach the database together.
			status, body, replayed := s.post("shared", "slow")
			replies[i] = reply{status, body, replayed}
		})
	}
	close(release)
	wg.Wait()

	fresh := 0
	for i, r := range replies {
		if r.status != http.StatusOK || r.body != "1" {
			t.Errorf("client %d (server %d) = %d %q, want 200 1", i, i%2, r.status, r.body)
		}
		if r.replayed == "false" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d replies not replayed, want exactly 1", fresh)
	}
	for i, s := range servers {
		if got := s.stop(); got != 0 {
			t.Fatalf("server %d exit status after SIGTERM = %d, want 0; stderr:\n%s", i, got, s.stderr)
		}
	}
	if st := readState(t, protocol.Durable, dir); st.Counter != 1 || len(st.Effects) != 1 {
		t.Fatalf("state = %+v, want counter 1 and one effect", st)
	}
}

// Ensure the crash points of the durable store in a real process: the
// effect of a crash before the commit is gone, a crash after the commit
// leaves it recorded, and the retry after a restart answers accordingly.
func TestDurableCrashRestartRetry(t *testing.T) {
	tests := []struct {
		fault         string
		counter       int64 // after the crash
		retryReplayed string
	}{
		{"crash-before-effect", 0, "false"},
		{"crash-after-effect", 0, "false"},
		{"crash-after-record", 1, "true"},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			dir := t.TempDir()
			s := startServer(t, true, "-state", dir, "-store", "durable", "-faults")
			if status, _, _ := s.post("same", tt.fault); status != 0 {
				t.Fatalf("crash request got status %d, want no reply", status)
			}
			if got := s.wait(); got != 23 {
				t.Fatalf("exit status = %d, want 23; stderr:\n%s", got, s.stderr)
			}
			if st := readState(t, protocol.Durable, dir); st.Counter != tt.counter {
				t.Fatalf("counter after the crash = %d, want %d", st.Counter, tt.counter)
			}
			s2 := startServer(t, true, "-state", dir, "-store", "durable", "-faults")
			if status, body, replayed := s2.post("same", ""); status != 200 || body != "1" || replayed != tt.retryReplayed {
				t.Fatalf("retry after restart = %d %q replayed %q, want 200 1 %s", status, body, replayed, tt.retryReplayed)
			}
			if got := s2.stop(); got != 0 {
				t.Fatalf("exit status after SIGTERM = %d, want 0", got)
			}
			if st := readState(t, protocol.Durable, dir); st.Counter != 1 {
				t.Fatalf("final counter = %d, want 1", st.Counter)
			}
		})
	}
}

// Ensure a database file holding garbage stops the start with exit 3 and one line naming it.
func TestDurableCorruptDatabaseExits3(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, durable.FileName)
	if err := os.WriteFile(path, []byte(strings.Repeat("\x00garbage", 2048)), 0o644); err != nil {
		t.Fatal(err)
	}
	refused(t, startServer(t, false, "-state", dir, "-store", "durable"), path)
}

package chaos

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
)

// serverBin is the effectserver built once for the package's tests.
var serverBin string

func TestMain(m *testing.M) {
	if sinktest.IsTarget() { // this binary as a target (target_test.go)
		os.Exit(sinktest.Serve())
	}
	os.Exit(servertest.Main(m, &serverBin))
}

// config is a short run on store s.
func config(t testing.TB, s protocol.Store) Config {
	return Config{ServerPath: serverBin, Store: s, StateRoot: t.TempDir(), Seed: 1,
		Replicas: 2, Clients: 8, Duration: 1500 * time.Millisecond, KillEvery: 300 * time.Millisecond}
}

// runRecorded runs cfg and checks what every run records, whatever the
// store or target (judging the history is the audit's: audited_test.go):
// the run did something; every planned kill is a kill or a kill_skipped
// event, in plan order; every replica running at the end was stopped
// cleanly (exit 0; a target may also end by the SIGTERM, 143); and no
// process is left.
func runRecorded(t *testing.T, cfg Config) Result {
	t.Helper()
	began := time.Now()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run(%s) error = %v", cfg.name(), err)
	}
	var text bytes.Buffer
	res.WriteText(&text)
	t.Logf("%s in %v\n%s", cfg.name(), time.Since(began).Round(time.Millisecond), text.String())
	h := res.History
	ok := 0
	for _, a := range h.Attempts {
		if a.Type == OK {
			ok++
		}
	}
	if len(h.Attempts) == 0 || ok == 0 {
		t.Errorf("%d attempts, %d ok: the run did nothing", len(h.Attempts), ok)
	}
	c := withDefaults(cfg)
	plan := chaosplan.Schedule{Seed: h.Seed, Replicas: h.Replicas}.Kills(c.Duration, c.KillEvery)
	planned, stops := 0, 0
	for _, e := range h.Servers {
		switch {
		case e.Kind == EventKill || e.Kind == EventKillSkipped:
			if planned >= len(plan) || e.Planned != planned || e.Replica != plan[planned].Replica {
				t.Errorf("event %+v, want planned kill %d of the %d planned next", e, planned, len(plan))
			}
			planned++
		case e.Kind == EventStop:
			stops++
			if e.ExitCode != 0 && (cfg.Target == nil || e.ExitCode != 143) {
				t.Errorf("replica %d ended with %d on the final SIGTERM, want a clean stop", e.Replica, e.ExitCode)
			}
		}
	}
	if planned != len(plan) || stops == 0 {
		t.Errorf("%d planned kills recorded of %d, %d stops; want every planned kill and a stop", planned, len(plan), stops)
	}
	sinktest.CheckNoneLeft(t, "effectserver")
	return res
}

// Ensure a run on the durable store under faults and kill -9 records
// what the audit needs: attempts, faults sent, kills and restarts, the
// journal at one place every replica shares.
func TestRunDurable(t *testing.T) {
	res := runRecorded(t, config(t, protocol.Durable))
	h := res.History
	faulted, starts := 0, 0
	for _, a := range h.Attempts {
		if a.Fault != "" {
			faulted++
		}
	}
	for _, e := range h.Servers {
		if e.Kind == EventStart {
			starts++
		}
	}
	if faulted == 0 || starts <= h.Replicas {
		t.Errorf("%d faulted attempts, %d starts of %d replicas: want faults sent and restarts", faulted, starts, h.Replicas)
	}
	if len(h.Places) != 1 || len(h.Places[0].Replicas) != 2 || h.Places[0].Counter != int64(len(h.Places[0].Effects)) {
		t.Errorf("places %+v, want one shared by both replicas, its counter its effects", h.Places)
	}
}

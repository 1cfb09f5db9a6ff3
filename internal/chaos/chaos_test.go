package chaos

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"idemlab/internal/audit"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/pgcluster/pgclustertest"
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

// runChecked runs cfg, has the audit's checker judge the history it wrote
// (the lab never judges its own runs), and checks what every run keeps,
// whatever the store: every server was stopped cleanly at the end, and
// the run did something.
func runChecked(t *testing.T, cfg Config) (Result, audit.ChaosVerdict) {
	t.Helper()
	if d := os.Getenv("CHAOS_DURATION"); d != "" {
		var err error
		if cfg.Duration, err = time.ParseDuration(d); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run(%s) error = %v", cfg.name(), err)
	}
	var text bytes.Buffer
	res.WriteText(&text)
	t.Logf("%s in %v\n%s", cfg.name(), time.Since(began).Round(time.Millisecond), text.String())
	if os.Getenv("CHAOS_JSON") != "" {
		t.Logf("%s", res.JSON())
	}
	v := judge(t, res)
	stops := 0
	for _, e := range res.History.Servers {
		if e.Kind == EventStop {
			stops++
		}
	}
	if got := v.Counts["clean_stops"]; got != int64(stops) || stops == 0 {
		t.Errorf("clean stops = %d of %d, want all (every replica running at the end exits 0 on SIGTERM)", got, stops)
	}
	sinktest.CheckNoneLeft(t, "effectserver")
	if v.Counts["intents"] == 0 || v.Counts["ok"] == 0 {
		t.Errorf("intents %d, ok attempts %d: the run did nothing", v.Counts["intents"], v.Counts["ok"])
	}
	return res, v
}

// judge has the audit's checker judge res's history, as written.
func judge(t *testing.T, res Result) audit.ChaosVerdict {
	t.Helper()
	var hist bytes.Buffer
	if err := res.WriteHistory(&hist); err != nil {
		t.Fatal(err)
	}
	v, err := audit.JudgeChaosHistory(&hist, protocol.CrashExitCode)
	if err != nil {
		t.Fatalf("the audit cannot read the history the run wrote: %v", err)
	}
	return v
}

// Ensure the durable store under faults and kill -9 on two replicas
// sharing one folder neither duplicates, loses an acknowledgement, nor
// leaves an intent stuck.
func TestRunDurable(t *testing.T) {
	runSound(t, config(t, protocol.Durable))
}

// soundTries is how many seeds runSound tries before it gives up on
// seeing a kill, a restart and a faulted attempt in one run.
const soundTries = 4

// runSound runs cfg, on a store that promises no duplicate, no lost
// acknowledgement and nothing stuck, and checks every run keeps that
// promise. The seed fixes the kill plan but not whether a planned kill
// lands: a kill is skipped when its target is down or is the last replica
// up, and on a loaded machine crash faults can keep a replica down at
// every planned moment of a short run. A run with no kill proves nothing
// about kill -9, so runSound tries the next seed (each run checked all the
// same) until one run had a kill, a restart and a faulted attempt.
func runSound(t *testing.T, cfg Config) {
	t.Helper()
	for try := range soundTries {
		res, v := runChecked(t, cfg)
		n := v.Counts
		if n["duplicates"] != 0 || n["lost_acks"] != 0 || n["stuck"] != 0 || !v.OK {
			t.Fatalf("%s seed %d: duplicates %d, lost acks %d, stuck %d, findings %+v; want 0, 0, 0, ok",
				res.Store, cfg.Seed, n["duplicates"], n["lost_acks"], n["stuck"], v.Findings)
		}
		if n["kills"] > 0 && n["restarts"] > 0 && n["faulted_attempts"] > 0 {
			return
		}
		t.Logf("%s seed %d (try %d of %d): kills %d, restarts %d, faulted attempts %d; trying the next seed for a run with some of each",
			res.Store, cfg.Seed, try+1, soundTries, n["kills"], n["restarts"], n["faulted_attempts"])
		cfg.Seed++
	}
	t.Errorf("%s: no run of %d seeds had a kill, a restart and a faulted attempt", cfg.Store, soundTries)
}

// Ensure the volatile store runs to the end under the same chaos and its
// duplicates are counted and shown, not violations: its keys live in one
// process's memory, so a restart, or a retry on the other replica (its own
// folder and counter), runs an intent again. Everything else it promises
// holds (no lost acknowledgement, nothing stuck, values in order).
func TestRunVolatile(t *testing.T) {
	_, v := runChecked(t, config(t, protocol.Volatile))
	n := v.Counts
	if n["lost_acks"] != 0 || n["stuck"] != 0 || !v.OK {
		t.Errorf("volatile: lost acks %d, stuck %d, findings %+v; want 0, 0, ok", n["lost_acks"], n["stuck"], v.Findings)
	}
	if got, want := v.Shown, n["duplicates"]; got != want {
		t.Errorf("volatile: shown findings %d, want the %d duplicates", got, want)
	}
	if n["applied_once"]+n["duplicates"]+n["not_applied"] != n["intents"] {
		t.Errorf("volatile: applied once %d + duplicates %d + not applied %d != %d intents", n["applied_once"], n["duplicates"], n["not_applied"], n["intents"])
	}
}

// Ensure the postgres store, two replicas on one database, keeps the
// durable store's promises under the same chaos.
func TestRunPostgres(t *testing.T) {
	cfg := config(t, protocol.Postgres)
	cfg.Databases = pgclustertest.Shared(t)
	runSound(t, cfg)
}

// SoakEnv names the environment variable that runs TestSoak: a duration
// (IDEMLAB_CHAOS_SOAK=60s) for the chaos phase of one run per store with
// the default parameters and seed 1. A soak is only a longer Duration.
const SoakEnv = "IDEMLAB_CHAOS_SOAK"

// Ensure a long run on every store keeps each store's promises; skipped
// unless IDEMLAB_CHAOS_SOAK is set.
func TestSoak(t *testing.T) {
	v := os.Getenv(SoakEnv)
	if v == "" {
		t.Skipf("%s not set (e.g. %s=60s runs one soak per store)", SoakEnv, SoakEnv)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", SoakEnv, v, err)
	}
	for _, s := range protocol.Stores {
		t.Run(string(s), func(t *testing.T) {
			cfg := Config{ServerPath: serverBin, Store: s, StateRoot: t.TempDir(), Seed: 1, Duration: d}
			if s.InDatabase() {
				cfg.Databases = pgclustertest.Shared(t)
			}
			if _, v := runChecked(t, cfg); !v.OK {
				t.Errorf("%s: findings %+v", s, v.Findings)
			}
		})
	}
}

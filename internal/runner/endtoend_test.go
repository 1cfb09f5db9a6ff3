package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"idemlab/internal/audit/strict"
	"idemlab/internal/casefile"
	"idemlab/internal/pgcluster"
	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
)

// Ensure the whole case suite runs on every store through real subprocesses
// (build, servers, audit as its own process), passes its audit, and shows
// the counters the case files expect. That results.json is byte-identical
// from run to run is what a plain run checks against the committed
// evidence, and CI's reproduction step with it; the targets have tests of
// their own (TestYourOwnService, caserun's).
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole suite")
	}
	// Without PostgreSQL a plain run skips the postgres column (unless CI's
	// IDEMLAB_REQUIRE_POSTGRES=1 makes that a failure, as Run then reports).
	stores := protocol.Stores
	if _, err := pgcluster.FindBinDir(); err != nil && os.Getenv(pgclustertest.RequireEnv) != "1" {
		stores = []protocol.Store{protocol.Volatile, protocol.Durable}
		t.Logf("the postgres column is not checked (%s): %v", pgcluster.Hint, err)
	}
	out := filepath.Join(t.TempDir(), "evidence")
	var log bytes.Buffer
	err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: stores, StoresGiven: true, PostgresAsked: len(stores) == len(protocol.Stores),
		Intents: DefaultIntents, Experiment: None, Stdout: &log, Stderr: &log})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	first, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Runs []struct {
			Case    string         `json:"case"`
			Store   protocol.Store `json:"store"`
			Counter int64          `json:"counter"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(first, &res); err != nil {
		t.Fatal(err)
	}
	// Counters come from the case files, never from Go code: adding a case
	// is adding a file.
	cases, err := casefile.LoadDir("../../cases", mustSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.Runs), len(cases)*len(stores); got != want {
		t.Fatalf("results.json has %d runs, want one per case and store: %d", got, want)
	}
	for i, r := range res.Runs {
		c, store := cases[i/len(stores)], stores[i%len(stores)]
		want := c.Expect[store].Counter
		if r.Case != c.Name || r.Store != store || r.Counter != want {
			t.Errorf("run %d = %s/%s counter %d, want %s/%s counter %d", i, r.Case, r.Store, r.Counter, c.Name, store, want)
		}
	}
}

func mustSchemas(t testing.TB) *strict.Schemas {
	t.Helper()
	s, err := strict.LoadSchemas("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

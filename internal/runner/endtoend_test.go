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
// (build, servers, audit as its own process), records one run per case and
// store in evidence order, and passes its audit, which judges each run
// against its case file's expectation. That results.json is byte-identical
// from run to run is what a plain run checks against the committed
// evidence, and CI's reproduction step with it; the targets have tests of
// their own (TestYourOwnService, caserun's).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
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
			Case  string         `json:"case"`
			Store protocol.Store `json:"store"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(first, &res); err != nil {
		t.Fatal(err)
	}
	cases, err := casefile.LoadDir("../../cases", mustSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.Runs), len(cases)*len(stores); got != want {
		t.Fatalf("results.json has %d runs, want one per case and store: %d", got, want)
	}
	for i, r := range res.Runs {
		c, store := cases[i/len(stores)], stores[i%len(stores)]
		if r.Case != c.Name || r.Store != store {
			t.Errorf("run %d = %s/%s, want %s/%s", i, r.Case, r.Store, c.Name, store)
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

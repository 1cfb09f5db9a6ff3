package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"idemlab/internal/casefile"
	"idemlab/internal/pgcluster"
	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
	"idemlab/internal/schemacheck"
)

// Ensure the whole case suite runs on every store through real subprocesses
// (build, servers, audit as its own process), passes its audit, shows the
// counters the case files expect, and writes a results.json that is
// byte-identical from run to run.
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
	dir := t.TempDir()
	var first []byte
	for i, out := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")} {
		var log bytes.Buffer
		err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: stores, PostgresAsked: len(stores) == len(protocol.Stores),
			Intents: DefaultIntents, Experiment: None, Stdout: &log, Stderr: &log})
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, log.String())
		}
		b, err := os.ReadFile(filepath.Join(out, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = b
			continue
		}
		if !bytes.Equal(first, b) {
			t.Fatalf("results.json differs between two runs:\n%s\n---\n%s", first, b)
		}
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

func mustSchemas(t testing.TB) *schemacheck.Set {
	t.Helper()
	s, err := schemacheck.Load("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

package durable

import (
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/store"
	"idemlab/internal/store/storetest"
)

// openEmpty opens an empty store of capacity, for the storetest contracts.
func openEmpty(t *testing.T, capacity int) *Store { return open(t, t.TempDir(), capacity) }

// Ensure the claims keep the store.Phased contract: leases, takeover,
// tokens, capacity and the key TTL, each phase committed.
func TestPhasedContract(t *testing.T) { storetest.Run(t, openEmpty) }

// Ensure a claim outlives its store (a crashed owner's process): a second
// store on the same folder sees it busy until the lease ends, then takes
// it over, and the first owner can no longer complete it.
func TestClaimSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, 4)
	storetest.Takeover(t, store.Intent{Key: "k", Fingerprint: fp("add-one")}, a, func() *Store {
		a.Close()
		return open(t, dir, 4)
	})
}

// Ensure the key TTL applies to Apply's keys (storetest.ApplyTTL).
func TestApplyKeyTTL(t *testing.T) { storetest.ApplyTTL(t, openEmpty) }

// Ensure a database of layout version 1 (before recorded_at and claims) is
// refused, naming its version, never upgraded in place.
func TestOpenRefusesVersion1(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	storetest.SQLiteExec(t, path+"?_journal_mode=WAL", `CREATE TABLE state (id INTEGER PRIMARY KEY, counter INTEGER NOT NULL, keys INTEGER NOT NULL);
INSERT INTO state VALUES (1, 0, 0);
CREATE TABLE keys (key TEXT PRIMARY KEY, fingerprint BLOB NOT NULL, value INTEGER NOT NULL);
CREATE TABLE effects (value INTEGER PRIMARY KEY, body_sha256 TEXT NOT NULL);
PRAGMA user_version = 1;`)
	if _, err := Open(dir, 4); err == nil || !strings.Contains(err.Error(), "schema version 1, want 2") {
		t.Fatalf("Open(version 1) = %v, want a refusal naming version 1", err)
	}
}

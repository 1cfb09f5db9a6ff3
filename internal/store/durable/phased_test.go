package durable

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idemlab/internal/store"
	"idemlab/internal/store/storetest"
)

// subject is a fresh store of capacity and key TTL ttl whose clock reads
// *now, for the storetest contracts.
func subject(t *testing.T, capacity int, ttl time.Duration, now *time.Time) *Store {
	s := open(t, t.TempDir(), capacity)
	s.SetKeyTTL(ttl)
	s.SetClockForTest(func() time.Time { return *now })
	return s
}

// Ensure the claims keep the store.Phased contract: leases, takeover,
// tokens, capacity and the key TTL, each phase committed.
func TestPhasedContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, capacity int, ttl time.Duration, now *time.Time) store.Phased {
		return subject(t, capacity, ttl, now)
	})
}

// Ensure a claim outlives its store (a crashed owner's process): a second
// store on the same folder sees it busy until the lease ends, then takes
// it over, and the first owner can no longer complete it.
func TestClaimSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	clock := func() time.Time { return now }
	a := open(t, dir, 4)
	a.SetClockForTest(clock)
	in := store.Intent{Key: "k", Fingerprint: fp("add-one")}
	first, err := a.Claim(in, time.Second)
	if err != nil || first.State != store.Owned {
		t.Fatalf("Claim = %+v, %v; want Owned", first, err)
	}
	a.Close()
	b := open(t, dir, 4)
	b.SetClockForTest(clock)
	if c, err := b.Claim(in, time.Second); err != nil || c.State != store.Busy {
		t.Fatalf("Claim on reopen within the lease = %+v, %v; want Busy", c, err)
	}
	now = now.Add(time.Second)
	second, err := b.Claim(in, time.Second)
	if err != nil || second.State != store.Owned || !second.TakenOver {
		t.Fatalf("Claim after the lease = %+v, %v; want Owned, taken over", second, err)
	}
	if err := b.Complete("k", first.Token, 1); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("Complete(first owner) = %v, want ErrClaimLost", err)
	}
	if err := b.Complete("k", second.Token, 2); err != nil {
		t.Fatal(err)
	}
}

// Ensure the key TTL applies to Apply's keys (storetest.ApplyTTL).
func TestApplyKeyTTL(t *testing.T) {
	storetest.ApplyTTL(t, func(t *testing.T, capacity int, ttl time.Duration, now *time.Time) storetest.Applier {
		return subject(t, capacity, ttl, now)
	})
}

// Ensure a database of layout version 1 (before recorded_at and claims) is
// refused, naming its version, never upgraded in place.
func TestOpenRefusesVersion1(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	db, err := sql.Open("sqlite", path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Exec(`CREATE TABLE state (id INTEGER PRIMARY KEY, counter INTEGER NOT NULL, keys INTEGER NOT NULL);
INSERT INTO state VALUES (1, 0, 0);
CREATE TABLE keys (key TEXT PRIMARY KEY, fingerprint BLOB NOT NULL, value INTEGER NOT NULL);
CREATE TABLE effects (value INTEGER PRIMARY KEY, body_sha256 TEXT NOT NULL);
PRAGMA user_version = 1;`)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, 4); err == nil || !strings.Contains(err.Error(), "schema version 1, want 2") {
		t.Fatalf("Open(version 1) = %v, want a refusal naming version 1", err)
	}
}

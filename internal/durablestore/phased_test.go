package durablestore

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idemlab/internal/phasedtest"
	"idemlab/internal/store"
)

// Ensure the claims keep the store.Phased contract: leases, takeover,
// tokens, capacity and the key TTL, each phase committed.
func TestPhasedContract(t *testing.T) {
	phasedtest.Run(t, func(t *testing.T, capacity int, ttl time.Duration, now *time.Time) store.Phased {
		s := open(t, t.TempDir(), capacity)
		s.SetKeyTTL(ttl)
		s.SetClockForTest(func() time.Time { return *now })
		return s
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

// Ensure the key TTL applies to Apply's keys: a replay within it, a new
// effect after it, and an expired key's place taken by a new key in a
// full store; RecordedWithTimes leaves expired keys out.
func TestApplyKeyTTL(t *testing.T) {
	const ttl = 10 * time.Second
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := open(t, t.TempDir(), 2)
	s.SetKeyTTL(ttl)
	s.SetClockForTest(func() time.Time { return now })
	steps := []struct {
		name     string
		advance  time.Duration
		key      string
		value    int64
		replayed bool
		err      error
		live     int
	}{
		{"a applies", 0, "a", 1, false, nil, 1},
		{"b applies", ttl / 2, "b", 2, false, nil, 2},
		{"c finds the store full", 0, "c", 0, false, store.ErrFull, 2},
		{"a replays just before its TTL", ttl/2 - time.Millisecond, "a", 1, true, nil, 2},
		{"a is a new effect at its TTL", time.Millisecond, "a", 3, false, nil, 2},
		{"c still finds the store full", 0, "c", 0, false, store.ErrFull, 2},
		{"b expired: c takes its place", ttl / 2, "c", 4, false, nil, 2},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		res, err := s.Apply(store.Intent{Key: st.key, Fingerprint: fp("add-one")}, noHook)
		if !errors.Is(err, st.err) || res.Value != st.value || res.Replayed != st.replayed {
			t.Fatalf("%s: Apply(%s) = %+v, %v; want value %d replayed %v, %v", st.name, st.key, res, err, st.value, st.replayed, st.err)
		}
		recs, err := s.RecordedWithTimes()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(recs), st.live; got != want {
			t.Fatalf("%s: RecordedWithTimes() holds %d keys, want %d", st.name, got, want)
		}
	}
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

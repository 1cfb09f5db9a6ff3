package effectserver

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"reflect"
	"testing"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
	"idemlab/internal/store/durable"
	"idemlab/internal/store/open"
	"idemlab/internal/store/storetest"
)

func onDurable(edit func(*Config)) func(*Config) { return on(protocol.Durable, edit) }

// Ensure a durable server replays every key after a restart on the same
// folder, and keeps 422 for another body.
func TestDurableReplayAfterReopen(t *testing.T) {
	dir := t.TempDir()
	f := newFixtureIn(t, dir, onDurable(nil))
	for _, key := range []string{"a", "b"} {
		if got := f.do(req{key: key}); got.status != 200 || got.replayed != "false" {
			t.Fatalf("POST %s = %+v, want 200 not replayed", key, got)
		}
	}
	f.close()
	g := newFixtureIn(t, dir, onDurable(nil))
	if got, want := g.srv.registry.Len(), 2; got != want {
		t.Fatalf("registry holds %d keys after the restart, want %d", got, want)
	}
	tests := []struct {
		r    req
		want resp
	}{
		{req{key: "a"}, resp{status: 200, body: "1", replayed: "true"}},
		{req{key: "b"}, resp{status: 200, body: "2", replayed: "true"}},
		{req{key: "a", body: str("different")}, resp{status: 422, body: bodyConflict}},
		{req{key: "c"}, resp{status: 200, body: "3", replayed: "false"}},
	}
	for i, tt := range tests {
		got := g.do(tt.r)
		got.ctype = ""
		if got != tt.want {
			t.Errorf("request %d after restart = %+v, want %+v", i, got, tt.want)
		}
	}
	if got := g.counter(); got != 3 {
		t.Fatalf("counter = %d, want 3", got)
	}
}

// Ensure what the registry of one server cannot know, a second server on
// the same database learns inside its transaction: a key the other
// recorded replays or gets 422, and a full store gets 429.
func TestDurableAnswersFromTransaction(t *testing.T) {
	tests := []struct {
		name   string
		first  []req // sent to server A
		second req   // sent to server B, started before A's requests
		want   resp
		count  int64
	}{
		{"replay of the other's key", []req{{key: "k"}}, req{key: "k"},
			resp{status: 200, body: "1", replayed: "true"}, 1},
		{"422 for the other's key", []req{{key: "k"}}, req{key: "k", body: str("different")},
			resp{status: 422, body: bodyConflict}, 1},
		{"429 when the other filled it", []req{{key: "a"}, {key: "b"}}, req{key: "c"},
			resp{status: 429, body: bodyFull}, 2},
		{"unkeyed still runs when full", []req{{key: "a"}, {key: "b"}}, req{},
			resp{status: 200, body: "3", replayed: "false"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			capacity := func(c *Config) { c.Capacity = 2 }
			a := newFixtureIn(t, dir, onDurable(capacity))
			b := newFixtureIn(t, dir, onDurable(capacity))
			for i, r := range tt.first {
				if got := a.do(r); got.status != 200 {
					t.Fatalf("first[%d] = %+v, want 200", i, got)
				}
			}
			got := b.do(tt.second)
			got.ctype = ""
			if got != tt.want {
				t.Fatalf("reply from the second server = %+v, want %+v", got, tt.want)
			}
			if got := b.counter(); got != tt.count {
				t.Fatalf("counter = %d, want %d", got, tt.count)
			}
			// A replay teaches B's registry the key; a refusal leaves nothing.
			wantLen := 0
			if tt.want.replayed == "true" {
				wantLen = 1
			}
			if got := b.srv.registry.Len(); got != wantLen {
				t.Fatalf("second registry holds %d keys, want %d", got, wantLen)
			}
		})
	}
}

// Ensure a durable effect whose transaction fails answers 500, leaves
// neither effect nor key, releases the key, and a retry runs.
func TestDurableFailedEffect(t *testing.T) {
	f := newFixture(t, onDurable(nil))
	// A row already holding value 1 makes the effects insert fail inside
	// the transaction, after the counter update.
	db := storetest.SQLite(t, filepath.Join(f.dir, durable.FileName)+"?_busy_timeout=5000")
	if _, err := db.Exec(`INSERT INTO effects VALUES (1, 'blocker')`); err != nil {
		t.Fatal(err)
	}
	if got, want := f.do(req{key: "k"}), (resp{status: 500, body: bodyEffectFailed, ctype: "text/plain; charset=utf-8"}); got != want {
		t.Fatalf("reply = %+v, want %+v", got, want)
	}
	if got := f.srv.registry.Len(); got != 0 {
		t.Fatalf("registry holds %d keys after a failed effect, want 0", got)
	}
	var counter, keys int
	if err := db.QueryRow(`SELECT counter, (SELECT count(*) FROM keys) FROM state`).Scan(&counter, &keys); err != nil {
		t.Fatal(err)
	}
	if counter != 0 || keys != 0 {
		t.Fatalf("after the failure: counter %d, %d keys, want 0 and 0", counter, keys)
	}
	if _, err := db.Exec(`DELETE FROM effects`); err != nil {
		t.Fatal(err)
	}
	f.wantRetryApplies()
}

// Ensure ReadState returns the counter and each applied effect's value and
// body hash, in order, for both stores; replays and refusals add nothing.
func TestReadState(t *testing.T) {
	sum := func(body string) string {
		s := sha256.Sum256([]byte(body))
		return hex.EncodeToString(s[:])
	}
	for _, kind := range stores {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			if got, err := open.ReadState(kind, place(t, kind, dir)); err != nil || len(got.Effects) != 0 || got.Counter != 0 {
				t.Fatalf("open.ReadState(empty folder) = %+v, %v, want zero", got, err)
			}
			f := newFixtureIn(t, dir, on(kind, faults))
			for _, r := range []req{
				{key: "a"},
				{key: "a"},
				{key: "a", body: str("x")},
				{body: str("x")},
				{key: "b", body: str(""), fault: "drop-reply"},
				{key: "c", fault: "crash-before-effect"},
			} {
				f.do(r)
			}
			f.close()
			want := store.State{Counter: 3, Effects: []store.Effect{{Value: 1, BodySHA256: sum("add-one")}, {Value: 2, BodySHA256: sum("x")}, {Value: 3, BodySHA256: sum("")}}}
			if got, err := open.ReadState(kind, place(t, kind, dir)); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("ReadState = %+v, %v, want %+v", got, err, want)
			}
		})
	}
}

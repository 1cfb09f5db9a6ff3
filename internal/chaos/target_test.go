package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"idemlab/internal/schemacheck"
	"idemlab/internal/serverproc"
	"idemlab/internal/target"
)

// tinyEnv makes this test binary a tiny idempotent service, a target the
// lab did not write: its key table in a file in STATE (it claims a durable
// store), its effect at the sink. The value names its flaw ("" none).
const tinyEnv = "CHAOS_TINY_TARGET"

// tinyMain serves POST /pay on PORT. A key done replays its value (marked
// X-Replayed: yes); a key in flight gets 409; a new key is marked in
// flight, its body POSTed to EFFECT_URL, and the sink's value recorded
// (the table written to STATE/keys.json before the reply) and answered.
// A failed effect frees the key. With the flaw "check-then-set" the
// in-flight mark is checked but set only once the effect is done, so a
// retry that arrives while the first attempt is still at the sink applies
// the effect again.
func tinyMain(flaw string) {
	type entry struct {
		Done  bool   `json:"done"`
		Value string `json:"value"`
	}
	file := filepath.Join(os.Getenv("STATE"), "keys.json")
	keys := map[string]*entry{}
	if b, err := os.ReadFile(file); err == nil {
		json.Unmarshal(b, &keys)
	}
	for k, e := range keys {
		if !e.Done {
			delete(keys, k) // an in-flight mark of a process that died
		}
	}
	var mu sync.Mutex
	save := func() {
		b, _ := json.Marshal(keys)
		os.WriteFile(file+".tmp", b, 0o644)
		os.Rename(file+".tmp", file)
	}
	http.HandleFunc("/pay", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		e, ok := keys[key]
		switch {
		case ok && e.Done:
			mu.Unlock()
			w.Header().Set("X-Replayed", "yes")
			io.WriteString(w, e.Value)
			return
		case ok:
			mu.Unlock()
			w.WriteHeader(http.StatusConflict)
			return
		case flaw != "check-then-set":
			keys[key] = &entry{}
		}
		mu.Unlock()
		resp, err := http.Post(os.Getenv("EFFECT_URL"), "text/plain", strings.NewReader(string(body)))
		var value []byte
		if err == nil {
			value, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil || resp.StatusCode != 200 {
			delete(keys, key)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		keys[key] = &entry{Done: true, Value: string(value)}
		save()
		w.Header().Set("X-Replayed", "no")
		w.Write(value)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("tiny ready")
	http.Serve(ln, nil)
}

// tinyTarget writes target.json for the tiny service with flaw into a
// fresh folder and loads it.
func tinyTarget(t *testing.T, flaw string) *target.Target {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`{
  "name": "tiny",
  "summary": "a tiny idempotent service keeping its keys in a file (this test binary)",
  "start": {"argv": [%q], "env": {"PORT": "{port}", "EFFECT_URL": "{effect_url}", "STATE": "{state}", %q: %q}, "ready": {"stdout": "^tiny ready$"}},
  "request": {"path": "/pay", "key_header": "Idempotency-Key"},
  "replay": {"header": "X-Replayed", "value": "yes"},
  "effects": "sink",
  "claims": {"durable": true, "shared_store": false, "capacity": null, "max_body": null}
}`, os.Args[0], tinyEnv, flaw)
	if err := os.WriteFile(filepath.Join(dir, target.FileName), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := schemacheck.Load(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := target.Load(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// targetConfig is a short run on tg without the faults that make any
// service whose effect is at the sink apply an intent twice: no crash and
// no kill (the crash gap: the effect done, its record not), and no
// handler failing after its effect (the service cannot tell whether the
// effect happened). What remains is the target's own concurrency.
func targetConfig(t *testing.T, tg *target.Target) Config {
	return Config{ServerPath: serverBin, Target: tg, StateRoot: t.TempDir(), Seed: 1, Clients: 8, Duration: 1500 * time.Millisecond,
		KillEvery: -1, Faults: []string{"delay", "slow", "stall", "drop-reply", "fail-effect", "give-up"}}
}

// Ensure a target whose in-flight lock is checked, then set, is caught by
// chaos: it claims a durable store, so its duplicate is a violation, and
// the finding names the intent and says one process applied it twice,
// with no restart between. The sound service under the same schedule
// keeps every promise.
func TestRunTargetCheckThenSet(t *testing.T) {
	before, _ := serverproc.ProcessesMentioning(tinyEnv)
	_, sound := runChecked(t, targetConfig(t, tinyTarget(t, "")))
	if n := sound.Counts; n["duplicates"] != 0 || n["lost_acks"] != 0 || n["stuck"] != 0 || !sound.OK {
		t.Errorf("the sound service: duplicates %d, lost acks %d, stuck %d, findings %+v; want 0, 0, 0, ok", n["duplicates"], n["lost_acks"], n["stuck"], sound.Findings)
	}
	broken, v := runChecked(t, targetConfig(t, tinyTarget(t, "check-then-set")))
	if v.OK || v.Counts["duplicates"] == 0 {
		t.Fatalf("check-then-set: duplicates %d, findings %+v; want duplicates, a violation", v.Counts["duplicates"], v.Findings)
	}
	f := v.Findings[0]
	if f.Rule != "duplicate" || f.Key != fmt.Sprintf("chaos-%d", f.Intent) || !strings.Contains(f.Detail, "by one process of replica 0, no restart between them") {
		t.Errorf("first finding %+v, want the duplicate, naming its intent and key, applied twice by one process", f)
	}
	if p := broken.Parameters.Replicas; p != 1 || broken.ReplicasNote == "" {
		t.Errorf("replicas %d, note %q: want 1, and a note (the target claims no shared store)", p, broken.ReplicasNote)
	}
	if after, _ := serverproc.ProcessesMentioning(tinyEnv); len(after) > len(before) {
		t.Errorf("target processes left after the runs: %v (before: %v)", after, before)
	}
}

// Ensure a run on a target under every fault it takes and the nemesis's
// kills ends cleanly and records what happened: fault kills, planned
// kills that landed or were skipped, and the sink's journal, each effect
// with the replica that called it and when it was applied.
func TestRunTargetFullChaos(t *testing.T) {
	cfg := targetConfig(t, tinyTarget(t, ""))
	cfg.Faults, cfg.KillEvery = nil, 300*time.Millisecond
	res, v := runChecked(t, cfg)
	n := v.Counts
	if got, want := res.Faults, FaultKinds; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("faults scheduled %v, want every kind %v", got, want)
	}
	if n["planned_kills"] == 0 || n["kills"]+n["kills_skipped"] != n["planned_kills"] {
		t.Errorf("kills %d + skipped %d, want the %d planned", n["kills"], n["kills_skipped"], n["planned_kills"])
	}
	if n["lost_acks"] != 0 || n["stuck"] != 0 {
		t.Errorf("lost acks %d, stuck %d; want 0 (a duplicate after the crash gap is this service's lesson)", n["lost_acks"], n["stuck"])
	}
	for _, e := range res.History.Places[0].Effects {
		if e.Replica == nil || e.AtUS == nil || *e.AtUS < res.History.ChaosStartUS {
			t.Fatalf("effect %d: replica or time missing from the sink's journal, or before the chaos phase: %+v", e.Value, e)
		}
	}
}

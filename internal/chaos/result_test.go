package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
)

// Hand-made histories: intent n has key "chaos-n" and body SHA-256
// "sha-n"; times are in µs.

func sha(n int) string { return "sha-" + strconv.Itoa(n) }

// ack is a 200 reply to attempt 0 of intent n on replica r over [start, end].
func ack(n, r int, start, end, value int64, replayed bool) Attempt {
	return Attempt{Kind: "attempt", Intent: n, Key: "chaos-" + strconv.Itoa(n), BodySHA256: sha(n), Replica: r,
		Phase: PhaseChaos, StartUS: start, EndUS: end, Type: OK, Outcome: protocol.OutcomeReply,
		Status: 200, Value: strconv.FormatInt(value, 10), Replayed: &replayed}
}

// lost is an attempt of intent n whose reply never came.
func lost(n, r int, start, end int64) Attempt {
	return Attempt{Kind: "attempt", Intent: n, Key: "chaos-" + strconv.Itoa(n), BodySHA256: sha(n), Replica: r,
		Phase: PhaseChaos, StartUS: start, EndUS: end, Type: Info, Outcome: protocol.OutcomeNoReply, Fault: "drop-reply"}
}

// journal is one place holding the given intents' effects, values 1.. in order.
func journal(place int, replicas []int, intents ...int) Place {
	p := Place{Place: place, Replicas: replicas, Counter: int64(len(intents))}
	for i, n := range intents {
		p.Effects = append(p.Effects, Effect{Value: int64(i + 1), BodySHA256: sha(n)})
	}
	return p
}

func shared(attempts []Attempt, intents ...int) History {
	return History{Header: Header{Store: protocol.Durable, Claims: StoreClaims(protocol.Durable), Replicas: 2, Clients: 1}, Attempts: attempts,
		Places: []Place{journal(0, []int{0, 1}, intents...)}}
}

// sampleHistory is a small hand-made history with one of each event.
func sampleHistory() History {
	h := shared([]Attempt{ack(0, 0, 0, 10, 1, false), lost(1, 0, 20, 30), ack(1, 1, 40, 50, 2, true)}, 0, 1)
	h.Seed = 7
	h.Faults = chaosplan.StoreFaults
	h.Servers = []ServerEvent{
		{Kind: EventStart, Replica: 0, AtUS: -5, PID: 100, Addr: "127.0.0.1:1", Planned: -1},
		{Kind: EventKill, Replica: 0, AtUS: 25, PID: 100, Addr: "127.0.0.1:1", Planned: 0},
		{Kind: EventExit, Replica: 0, AtUS: 26, PID: 100, Addr: "127.0.0.1:1", ExitCode: 137, Planned: -1},
		{Kind: EventKillSkipped, Replica: 1, AtUS: 45, PID: 101, Addr: "127.0.0.1:2", Planned: 1, Error: chaosplan.SkipLastUp},
		{Kind: EventStop, Replica: 1, AtUS: 60, PID: 101, Addr: "127.0.0.1:2", Planned: -1},
	}
	return h
}

// Ensure a history is written one JSON object per line, attempts and
// server events merged in time order, every field in its fixed order (the
// audit's strict reader of these lines is tested against the corpus,
// testdata/spec/chaos).
func TestHistoryRoundTrip(t *testing.T) {
	h := sampleHistory()
	var b bytes.Buffer
	if err := h.Write(&b); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		var k struct{ Kind string }
		if err := json.Unmarshal([]byte(line), &k); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		kinds = append(kinds, k.Kind)
	}
	if got, want := strings.Join(kinds, " "), "run start attempt attempt kill exit attempt kill_skipped stop place effect effect"; got != want {
		t.Errorf("line kinds = %s, want %s", got, want)
	}
	want := `{"kind":"attempt","intent":0,"key":"chaos-0","body_sha256":"sha-0","client":0,"replica":0,"attempt":0,"phase":"chaos","start_us":0,"end_us":10,"fault":"","type":"ok","outcome":"reply","status":200,"value":"1","replayed":false,"error":"","sink_fired":null}`
	if !strings.Contains(b.String(), want) && !strings.Contains(writeString(t, h), want+"\n") {
		t.Errorf("history has no line\n%s\n%s", want, writeString(t, h))
	}
}

func writeString(t *testing.T, h History) string {
	t.Helper()
	var b bytes.Buffer
	if err := h.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Ensure chaos.json keeps its field order, ends with a newline, and gives
// the same bytes twice.
func TestJSON(t *testing.T) {
	h := History{Header: Header{Store: protocol.Volatile, Claims: StoreClaims(protocol.Volatile), Replicas: 2, Clients: 1, Seed: 3},
		Attempts: []Attempt{ack(0, 0, 0, 10, 1, false), lost(1, 0, 20, 30), ack(1, 1, 40, 50, 1, false), lost(2, 1, 60, 70)},
		Places:   []Place{journal(0, []int{0}, 0, 1), journal(1, []int{1}, 1)}}
	cfg := withDefaults(Config{Store: protocol.Volatile, Seed: 3})
	r := newResult(cfg, h, 1500*time.Millisecond, 20*time.Millisecond, false, false)
	doc := r.JSON()
	if !bytes.Equal(doc, r.JSON()) {
		t.Error("JSON() differs between two calls")
	}
	if !bytes.HasSuffix(doc, []byte("}\n")) {
		t.Error("JSON() has no final newline")
	}
	var keys []string
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.Token()
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var skip json.RawMessage
		dec.Decode(&skip)
	}
	if got, want := strings.Join(keys, " "), "schema_version experiment store target target_dir target_digest claims replicas_note seed parameters faults wall capped"; got != want {
		t.Errorf("top-level keys %s, want %s", got, want)
	}
}

// Ensure Run refuses what it cannot run before starting any server.
func TestRunRefuses(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"no server", func(c *Config) { c.ServerPath = "" }, "no server binary"},
		{"unknown store", func(c *Config) { c.Store = "mongo" }, `unknown store "mongo"`},
		{"no state root", func(c *Config) { c.StateRoot = filepath.Join(c.StateRoot, "nope") }, "is not a folder"},
		{"postgres without databases", func(c *Config) { c.Store = protocol.Postgres }, "no database server"},
		{"five replicas", func(c *Config) { c.Replicas = 5 }, "replicas 5 outside 1..4"},
		{"negative clients", func(c *Config) { c.Clients = -1 }, "clients -1 outside 1..64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config(t, protocol.Durable)
			tt.edit(&c)
			_, err := Run(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// Ensure a cancelled run ends with the context's error and leaves no
// server behind: every replica started is reaped on that path too.
func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := config(t, protocol.Durable)
	cfg.Duration = 10 * time.Second
	timer := time.AfterFunc(300*time.Millisecond, cancel)
	defer timer.Stop()
	began := time.Now()
	_, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run(cancelled) error = %v, want context.Canceled", err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("Run took %v to return after the cancel at 300ms", d)
	}
	sinktest.CheckNoneLeft(t, "effectserver")
}

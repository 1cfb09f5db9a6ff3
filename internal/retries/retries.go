// Package retries is the lab's retries experiment: it sends intents through
// client designs (never retry, retry without a key, with one key per intent,
// and the client-side lessons: what to retry, Retry-After, retry layers,
// where the key is made and kept) against a real effectserver under drops
// and timeouts. Each row (a client against a registry) gets a fresh server;
// every intent has a unique body, so once the server exited its journal of
// applied effects says how many intents were lost, applied once, or
// duplicated (client replies are never counted). The client counts the
// attempts it sent and the 4xx/5xx replies it got: the calls a design wastes.
//
// Every random decision (drop before sending, the server-side delay, the
// backoff) comes from a generator derived from (seed, row, intent), not from
// goroutine scheduling; the counts still depend on real timing (a 30 ms
// timeout against a 0-60 ms handler).
package retries

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"idemlab/internal/client"
	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store"
)

// A Client names a client design.
type Client string

// The client designs. Every client but the first four retries only what
// is retryable: a network error, a timeout (or an attempt dropped before
// sending), 429 and 5xx.
const (
	NeverRetry   Client = "never-retry"    // one attempt, no key
	RetryNoKey   Client = "retry-no-key"   // up to MaxAttempts, no key, any failure retried
	RetrySameKey Client = "retry-same-key" // up to MaxAttempts, one key per intent on every attempt, any failure retried

	// Retry4xx and RetryRetryable both reuse a key for two intents (every
	// CollideEvery-th intent takes the key of the one before it, with its
	// own body: 422 from the server); Retry4xx retries that 422 like any
	// failure, RetryRetryable does not.
	Retry4xx       Client = "retry-4xx"
	RetryRetryable Client = "retry-retryable"
	// IgnoreRetryAfter and HonourRetryAfter go through a load-shedding
	// gateway (at most ShedInflight requests in flight, else 429 with
	// Retry-After: RetryAfterS); IgnoreRetryAfter waits only its backoff,
	// HonourRetryAfter at least what Retry-After says.
	IgnoreRetryAfter Client = "ignore-retry-after"
	HonourRetryAfter Client = "honour-retry-after"
	// RetryThreeLayers nests Layers retry loops of LayerAttempts attempts
	// each (a handler calls a service calls a client, each retrying), one
	// key per intent from the top; RetryOneLayer retries at one layer only.
	RetryThreeLayers Client = "retry-3-layers"
	RetryOneLayer    Client = "retry-1-layer"
	// RetryNewKey makes a new key inside the retry loop: one per attempt.
	RetryNewKey Client = "retry-new-key"
	// RestartKeyInMemory and RestartKeyInFile restart after an intent's
	// first failed attempt, then retry it; the key kept in memory is gone
	// after the restart (a new one is made), the key written to a file
	// before the first send is read back.
	RestartKeyInMemory Client = "restart-key-in-memory"
	RestartKeyInFile   Client = "restart-key-in-file"
)

// Row is one client design against one registry, sound or deliberately
// broken (effectserver -unsafe-registry).
type Row struct {
	Client   Client
	Registry protocol.Flaw
}

// RegistryName is how retries.json names a row's registry.
func (r Row) RegistryName() string {
	if r.Registry == protocol.Sound {
		return "sound"
	}
	return string(r.Registry)
}

// String names the row as client/registry.
func (r Row) String() string { return string(r.Client) + "/" + r.RegistryName() }

// Rows are the experiment's rows, in order. A row's index here is part of
// its intents' random streams.
var Rows = []Row{
	{NeverRetry, protocol.Sound},
	{RetryNoKey, protocol.Sound},
	{RetrySameKey, protocol.Sound},
	{RetrySameKey, protocol.FlawRecordAfterEffect},
	// The client-side lessons, after the first four (whose indexes are
	// part of their random streams).
	{Retry4xx, protocol.Sound},
	{RetryRetryable, protocol.Sound},
	{IgnoreRetryAfter, protocol.Sound},
	{HonourRetryAfter, protocol.Sound},
	{RetryThreeLayers, protocol.Sound},
	{RetryOneLayer, protocol.Sound},
	{RetryNewKey, protocol.Sound},
	{RestartKeyInMemory, protocol.Sound},
	{RestartKeyInFile, protocol.Sound},
}

// Parameters are the experiment's constants, recorded with its result.
type Parameters struct {
	Intents          int `json:"intents"`             // intents per row
	Workers          int `json:"workers"`             // intents in flight at once per row
	DropPercent      int `json:"drop_percent"`        // chance (in %) that the client drops a request before sending it
	ClientTimeoutMS  int `json:"client_timeout_ms"`   // per attempt, connection to reply
	MaxServerDelayMS int `json:"max_server_delay_ms"` // server delay drawn uniformly from 0..this, in whole ms
	MaxAttempts      int `json:"max_attempts"`        // attempts per intent for the retrying clients
	BackoffBaseMS    int `json:"backoff_base_ms"`     // backoff before attempt n+1: r·min(cap, base·2^n) ms,
	BackoffCapMS     int `json:"backoff_cap_ms"`      // n = attempts made so far (1 before the second)
	TotalDeadlineMS  int `json:"total_deadline_ms"`   // per intent, over all its attempts and waits; 0: none
	CollideEvery     int `json:"collide_every"`       // retry-4xx/retry-retryable: every Nth intent reuses the key of the one before
	ShedInflight     int `json:"shed_inflight"`       // the Retry-After rows' gateway: requests in flight before it answers 429
	RetryAfterS      int `json:"retry_after_s"`       // the gateway's Retry-After, in seconds
	Layers           int `json:"layers"`              // retry-3-layers: nested retry loops
	LayerAttempts    int `json:"layer_attempts"`      // attempts per layer, for retry-3-layers and retry-1-layer
}

// Default holds the design's parameters.
var Default = Parameters{
	Intents: 200, Workers: 10, DropPercent: 15, ClientTimeoutMS: 30,
	MaxServerDelayMS: 60, MaxAttempts: 30, BackoffBaseMS: 5, BackoffCapMS: 100,
	TotalDeadlineMS: 0, CollideEvery: 10, ShedInflight: 4, RetryAfterS: 1, Layers: 3, LayerAttempts: 3,
}

// Config says what to run; Parameters are used as given (start from Default).
type Config struct {
	ServerPath string // the effectserver binary
	StateRoot  string // an existing folder; each row gets a fresh state folder inside it
	Seed       uint64 // the root of every random decision
	Rows       []Row  // rows to run, each from Rows (default: all of Rows)
	Parameters
}

// RowResult is what the server's journal says about one row's intents.
type RowResult struct {
	Client      Client `json:"client"`
	Registry    string `json:"registry"`
	Lost        int    `json:"lost"`         // intents applied 0 times
	AppliedOnce int    `json:"applied_once"` // intents applied exactly once
	Duplicated  int    `json:"duplicated"`   // intents applied more than once
	Sent        int    `json:"sent"`         // attempts the client sent (not dropped before sending), all intents
	Refused     int    `json:"refused"`      // replies with a 4xx or 5xx status the client received
}

// Result is the experiment's outcome.
type Result struct {
	Seed       uint64      `json:"seed"`
	Parameters Parameters  `json:"parameters"`
	Rows       []RowResult `json:"rows"`
}

// Server process limits.
const (
	readyWithin = 10 * time.Second
	stopWithin  = 15 * time.Second // above the server's own shutdown grace
)

// Run runs the rows of cfg, each on a fresh server, all at once, and
// returns their counts in order. A row that cannot run or be counted is an
// error naming it; the Result then holds the rows that completed.
func Run(ctx context.Context, cfg Config) (Result, error) {
	p := cfg.Parameters
	if err := p.Check(); err != nil {
		return Result{}, fmt.Errorf("retries: %w", err)
	}
	rows := cfg.Rows
	if len(rows) == 0 {
		rows = Rows
	}
	streams := make([]int, len(rows)) // a row's index in Rows
	for i, r := range rows {
		if streams[i] = slices.Index(Rows, r); streams[i] < 0 {
			return Result{}, fmt.Errorf("retries: row %s: not an experiment row", r)
		}
	}
	if cfg.ServerPath == "" {
		return Result{}, errors.New("retries: no server binary given")
	}
	if fi, err := os.Stat(cfg.StateRoot); err != nil || !fi.IsDir() {
		return Result{}, fmt.Errorf("retries: state root %q is not a folder", cfg.StateRoot)
	}

	results := make([]RowResult, len(rows))
	errs := make([]error, len(rows))
	var wg sync.WaitGroup
	for i, r := range rows {
		wg.Go(func() {
			results[i], errs[i] = runRow(ctx, cfg, p, r, streams[i])
			if errs[i] != nil {
				errs[i] = fmt.Errorf("retries: row %s: %w", r, errs[i])
			}
		})
	}
	wg.Wait()
	res := Result{Seed: cfg.Seed, Parameters: p, Rows: []RowResult{}}
	for i := range rows {
		if errs[i] == nil {
			res.Rows = append(res.Rows, results[i])
		}
	}
	return res, errors.Join(errs...)
}

// Bounds on the knobs a caller sets, so that no value can exhaust the
// machine: every row runs at once with Workers connections in flight (at
// the caps: 658 files open, 198 MB peak RSS), and a row's server may hold
// Intents×(MaxAttempts+1) keys (retry-new-key makes one per attempt).
const (
	MaxIntents         = 10000
	MaxWorkers         = 64
	MaxAttempts        = 100
	MaxClientTimeoutMS = 60000
	MaxTotalDeadlineMS = 600000
	MaxServerDelayMS   = 60000
)

// Check refuses knobs the experiment cannot run with, naming each and its range.
func (p Parameters) Check() error {
	rangeErr := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s %d outside %d..%d", name, v, lo, hi)
		}
		return nil
	}
	return errors.Join(
		rangeErr("intents", p.Intents, 1, MaxIntents),
		rangeErr("workers", p.Workers, 1, MaxWorkers),
		rangeErr("drop_percent", p.DropPercent, 0, 100),
		rangeErr("client_timeout_ms", p.ClientTimeoutMS, 1, MaxClientTimeoutMS),
		rangeErr("max_server_delay_ms", p.MaxServerDelayMS, 0, MaxServerDelayMS),
		rangeErr("max_attempts", p.MaxAttempts, 1, MaxAttempts),
		rangeErr("backoff_base_ms", p.BackoffBaseMS, 0, MaxClientTimeoutMS),
		rangeErr("backoff_cap_ms", p.BackoffCapMS, 0, MaxClientTimeoutMS),
		rangeErr("total_deadline_ms (0: none)", p.TotalDeadlineMS, 0, MaxTotalDeadlineMS),
		rangeErr("collide_every", p.CollideEvery, 2, MaxIntents),
		rangeErr("shed_inflight", p.ShedInflight, 1, MaxWorkers),
		rangeErr("retry_after_s", p.RetryAfterS, 0, 60),
		rangeErr("layers", p.Layers, 1, 5),
		rangeErr("layer_attempts", p.LayerAttempts, 1, 10),
	)
}

// runRow runs one row on its own server and counts from its journal.
func runRow(ctx context.Context, cfg Config, p Parameters, r Row, stream int) (RowResult, error) {
	dir, err := os.MkdirTemp(cfg.StateRoot, "retries-"+string(r.Client)+"-"+r.RegistryName()+"-")
	if err != nil {
		return RowResult{}, fmt.Errorf("state folder: %w", err)
	}
	args := []string{"-state", dir, "-addr", protocol.DefaultAddr, "-store", string(protocol.Volatile), "-faults",
		// Room for every key any row makes (retry-new-key: one per
		// attempt): a full registry would answer 429 instead of an effect.
		"-capacity", strconv.Itoa(max(p.Intents*(p.MaxAttempts+1), 64))}
	if r.Registry != protocol.Sound {
		args = append(args, "-unsafe-registry", string(r.Registry))
	}
	srv, err := serverproc.Start(ctx, cfg.ServerPath, args, readyWithin)
	if err != nil {
		return RowResult{}, fmt.Errorf("start server (%s): %w", strings.Join(args, " "), err)
	}
	defer srv.Kill()
	url := client.EffectURL(srv.Addr)
	if r.Client == IgnoreRetryAfter || r.Client == HonourRetryAfter {
		g, err := startGateway(url, p.ShedInflight, p.RetryAfterS)
		if err != nil {
			return RowResult{}, err
		}
		defer g.close()
		url = g.url
	}
	keys, err := os.MkdirTemp(cfg.StateRoot, "retries-client-"+string(r.Client)+"-")
	if err != nil {
		return RowResult{}, fmt.Errorf("client folder: %w", err)
	}
	defer os.RemoveAll(keys)
	t, err := drive(ctx, p, cfg.Seed, r, stream, url, keys)
	if err != nil {
		return RowResult{}, err
	}
	code, err := srv.Stop(stopWithin)
	if err != nil {
		return RowResult{}, fmt.Errorf("stop server: %w", err)
	}
	if code != 0 {
		return RowResult{}, fmt.Errorf("server exited with code %d on SIGTERM, want 0", code)
	}
	st, err := serverproc.ReadState(ctx, cfg.ServerPath, protocol.Volatile, store.Place{Dir: dir})
	if err != nil {
		return RowResult{}, fmt.Errorf("read server state: %w", err)
	}
	res := RowResult{Client: r.Client, Registry: r.RegistryName(), Sent: t.sent, Refused: t.refused}
	if err := countEffects(&res, st, p.Intents, stream); err != nil {
		return RowResult{}, fmt.Errorf("server state in %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return RowResult{}, fmt.Errorf("remove state folder: %w", err)
	}
	return res, nil
}

// countEffects counts from the journal st the row's intents applied never,
// once and more than once; every effect must be one of its intents'.
func countEffects(res *RowResult, st store.State, intents, stream int) error {
	if got := int64(len(st.Effects)); got != st.Counter {
		return fmt.Errorf("%d effects journaled, counter %d", got, st.Counter)
	}
	intentOf := make(map[string]int, intents) // by the SHA-256 of its body
	for i := range intents {
		sum := sha256.Sum256(body(stream, i))
		intentOf[hex.EncodeToString(sum[:])] = i
	}
	applied := make([]int, intents)
	for n, e := range st.Effects {
		i, ok := intentOf[e.BodySHA256]
		if !ok {
			return fmt.Errorf("effect %d has body SHA-256 %s, which no intent sent", n+1, e.BodySHA256)
		}
		applied[i]++
	}
	for _, n := range applied {
		switch n {
		case 0:
			res.Lost++
		case 1:
			res.AppliedOnce++
		default:
			res.Duplicated++
		}
	}
	return nil
}

// body is intent i's request body in the row with stream index stream:
// unique within the experiment, so the journal names the intent.
func body(stream, i int) []byte { return fmt.Appendf(nil, "intent-%d-%d", stream, i) }

// key is intent i's idempotency key, chosen once before its first send.
func key(stream, i int) string { return fmt.Sprintf("r%d-i%d", stream, i) }

// attemptKey is the key a client that makes its key inside the retry loop
// sends on attempt n of intent i: another one every time.
func attemptKey(stream, i, n int) string { return fmt.Sprintf("r%d-i%d-a%d", stream, i, n) }

// JSON encodes r as retries.json, fields in a fixed order, rows in run order.
func (r Result) JSON() []byte {
	if r.Rows == nil {
		r.Rows = []RowResult{}
	}
	doc := struct {
		SchemaVersion int `json:"schema_version"`
		Result
	}{1, r}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		panic(fmt.Sprintf("retries: encode result: %v", err)) // plain ints and strings cannot fail
	}
	return b.Bytes()
}

// WriteText prints r as a table a person reads: one line per row.
func (r Result) WriteText(w io.Writer) error {
	p := r.Parameters
	deadline := "no total deadline"
	if p.TotalDeadlineMS > 0 {
		deadline = fmt.Sprintf("total deadline %d ms", p.TotalDeadlineMS)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "retries: %d intents per row, seed %d; %d workers, %d%% dropped before sending, timeout %d ms, server delay 0-%d ms, up to %d attempts, %s\n",
		p.Intents, r.Seed, p.Workers, p.DropPercent, p.ClientTimeoutMS, p.MaxServerDelayMS, p.MaxAttempts, deadline)
	cw, rw := len("client"), len("registry")
	for _, row := range r.Rows {
		cw, rw = max(cw, len(row.Client)), max(rw, len(row.Registry))
	}
	fmt.Fprintf(&b, "%-*s  %-*s  %4s  %12s  %10s  %5s  %7s\n", cw, "client", rw, "registry", "lost", "applied once", "duplicated", "sent", "refused")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-*s  %-*s  %4d  %12d  %10d  %5d  %7d\n", cw, row.Client, rw, row.Registry, row.Lost, row.AppliedOnce, row.Duplicated, row.Sent, row.Refused)
	}
	_, err := w.Write(b.Bytes())
	return err
}

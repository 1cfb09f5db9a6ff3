package retries

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/protocol"
)

// serverBin is the effectserver built once for the package's tests.
var serverBin string

func TestMain(m *testing.M) { os.Exit(servertest.Main(m, &serverBin)) }

func config(t testing.TB, intents int, rows ...Row) Config {
	p := Default
	p.Intents = intents
	return Config{ServerPath: serverBin, StateRoot: t.TempDir(), Seed: 7, Rows: rows, Parameters: p}
}

// checkRow asserts the invariant every row keeps: each intent is counted
// exactly once, as lost, applied once or duplicated.
func checkRow(t *testing.T, row RowResult, intents int) {
	t.Helper()
	if got := row.Lost + row.AppliedOnce + row.Duplicated; got != intents {
		t.Errorf("%s/%s: lost %d + applied once %d + duplicated %d = %d, want %d intents",
			row.Client, row.Registry, row.Lost, row.AppliedOnce, row.Duplicated, got, intents)
	}
}

// Ensure the sound rows end to end against the real server: the counts add
// up to the intents, never-retry duplicates nothing, and retry-same-key
// neither loses nor duplicates. retry-no-key loses nothing but in the
// unlikely case every attempt was dropped, so only the sum is asserted.
func TestRunSoundRows(t *testing.T) {
	const intents = 20
	sound := Rows[:3]
	res, err := Run(context.Background(), config(t, intents, sound...))
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	if got, want := len(res.Rows), len(sound); got != want {
		t.Fatalf("len(Rows) = %d, want %d", got, want)
	}
	for i, row := range res.Rows {
		if row.Client != sound[i].Client || row.Registry != sound[i].RegistryName() {
			t.Errorf("Rows[%d] = %s/%s, want %s", i, row.Client, row.Registry, sound[i])
		}
		checkRow(t, row, intents)
	}
	if got := res.Rows[0].Duplicated; got != 0 {
		t.Errorf("never-retry: duplicated = %d, want 0", got)
	}
	if got := res.Rows[2]; got.Lost != 0 || got.Duplicated != 0 {
		t.Errorf("retry-same-key/sound: lost %d, duplicated %d, want 0 and 0", got.Lost, got.Duplicated)
	}
	if res.Seed != 7 || res.Parameters.Intents != intents || res.Parameters.MaxAttempts != Default.MaxAttempts {
		t.Errorf("Result seed %d, parameters %+v; want seed 7, %d intents, defaults otherwise", res.Seed, res.Parameters, intents)
	}
	t.Logf("\n%s", text(t, res))
}

// Ensure the record-after-effect row really runs against the broken
// registry and duplicates: a keyed client is no protection when the
// registry records the key only after the effect. A server that refused the
// flaw fails the test, as does a row that duplicated nothing.
func TestRunUnsafeRow(t *testing.T) {
	const intents = 60
	row := Row{RetrySameKey, protocol.FlawRecordAfterEffect}
	res, err := Run(context.Background(), config(t, intents, row))
	if err != nil {
		t.Fatalf("Run(%s) error = %v", row, err)
	}
	if len(res.Rows) != 1 {
		t.Fatalf("len(Rows) = %d, want 1", len(res.Rows))
	}
	got := res.Rows[0]
	checkRow(t, got, intents)
	if got.Registry != "record-after-effect" || got.Duplicated == 0 {
		t.Fatalf("row %s/%s duplicated %d of %d intents, want the record-after-effect registry to duplicate some", got.Client, got.Registry, got.Duplicated, intents)
	}
	t.Logf("\n%s", text(t, res))
}

// Ensure Run refuses what it cannot run before starting any server.
func TestRunRefuses(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"unknown row", func(c *Config) { c.Rows = []Row{{"retry-twice", protocol.Sound}} }, "row retry-twice/sound: not an experiment row"},
		{"no server", func(c *Config) { c.ServerPath = "" }, "no server binary"},
		{"no state root", func(c *Config) { c.StateRoot = filepath.Join(c.StateRoot, "nope") }, "is not a folder"},
		{"drop over 100", func(c *Config) { c.DropPercent = 101 }, "drop_percent 101"},
		{"negative intents", func(c *Config) { c.Intents = -1 }, "intents -1 outside 1..10000"},
		{"too many intents", func(c *Config) { c.Intents = 100000000 }, "intents 100000000 outside 1..10000"},
		{"too many workers", func(c *Config) { c.Workers = 100000 }, "workers 100000 outside 1..64"},
		{"too many attempts", func(c *Config) { c.MaxAttempts = 101 }, "max_attempts 101 outside 1..100"},
		{"too long a timeout", func(c *Config) { c.ClientTimeoutMS = 60001 }, "client_timeout_ms 60001 outside 1..60000"},
		{"too long a deadline", func(c *Config) { c.TotalDeadlineMS = 600001 }, "total_deadline_ms (0: none) 600001 outside 0..600000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config(t, 5)
			tt.edit(&c)
			_, err := Run(context.Background(), c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// Ensure a cancelled context ends the run with its error and leaves no
// server behind (serverproc kills it on every path).
func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, config(t, 5, Rows[0]))
	if !errors.Is(err, context.Canceled) && (err == nil || !strings.Contains(err.Error(), "context canceled")) {
		t.Fatalf("Run(cancelled) error = %v, want context canceled", err)
	}
}

// Ensure an intent's decisions depend only on (seed, row, intent).
func TestDecisionsDeterministic(t *testing.T) {
	draw := func(seed uint64, stream, intent int) []int64 {
		d := newDecisions(seed, stream, intent)
		var out []int64
		for n := range 6 {
			b := 0
			if d.drop(15) {
				b = 1
			}
			out = append(out, int64(b), int64(d.delayMS(60)), int64(d.backoff(n+1, 5, 100)))
		}
		return out
	}
	a, b := draw(1, 2, 3), draw(1, 2, 3)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("same (seed, row, intent) gave %v and %v", a, b)
	}
	for _, other := range [][]int64{draw(2, 2, 3), draw(1, 3, 3), draw(1, 2, 4)} {
		if fmt.Sprint(a) == fmt.Sprint(other) {
			t.Errorf("another (seed, row, intent) gave the same decisions %v", a)
		}
	}
}

// Ensure the draws stay in their ranges and the drop rate is near its
// percentage (a fixed seed: the numbers are the same every run).
func TestDecisionRanges(t *testing.T) {
	drops, sawZero, sawMax := 0, false, false
	const n = 20000
	for i := range n {
		d := newDecisions(42, 0, i)
		if d.drop(15) {
			drops++
		}
		ms := d.delayMS(60)
		if ms < 0 || ms > 60 {
			t.Fatalf("delayMS(60) = %d, outside 0..60", ms)
		}
		sawZero, sawMax = sawZero || ms == 0, sawMax || ms == 60
		for k := 1; k < 6; k++ {
			limit := time.Duration(min(100, 5<<k)) * time.Millisecond
			if b := d.backoff(k, 5, 100); b < 0 || b >= limit {
				t.Fatalf("backoff(%d) = %v, outside [0, %v)", k, b, limit)
			}
		}
	}
	if drops < n*13/100 || drops > n*17/100 {
		t.Errorf("drop(15) true %d times in %d, want about 15%%", drops, n)
	}
	if !sawZero || !sawMax {
		t.Errorf("delayMS(60) never drew 0 (%v) or 60 (%v)", sawZero, sawMax)
	}
	if d := newDecisions(1, 0, 0); d.drop(0) || !d.drop(100) {
		t.Error("drop(0) dropped or drop(100) sent")
	}
}

func text(t *testing.T, r Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var sample = Result{Seed: 1, Parameters: Default, Rows: []RowResult{
	{NeverRetry, "sound", 43, 157, 0, 170, 0},
	{RetryNoKey, "sound", 0, 121, 79, 480, 0},
	{RetrySameKey, "sound", 0, 200, 0, 470, 3},
	{RetrySameKey, "record-after-effect", 0, 150, 50, 460, 0},
}}

// Ensure the text table's layout.
func TestWriteText(t *testing.T) {
	want := `retries: 200 intents per row, seed 1; 10 workers, 15% dropped before sending, timeout 30 ms, server delay 0-60 ms, up to 30 attempts, no total deadline
client          registry             lost  applied once  duplicated   sent  refused
never-retry     sound                  43           157           0    170        0
retry-no-key    sound                   0           121          79    480        0
retry-same-key  sound                   0           200           0    470        3
retry-same-key  record-after-effect     0           150          50    460        0
`
	if got := text(t, sample); got != want {
		t.Errorf("WriteText() =\n%s\nwant\n%s", got, want)
	}
}

// proposedSchema is retries.schema.json as the new rows and counts need
// it; schema/retries.schema.json belongs to the audit's owner, who copies
// it over (TestSchemaCommitted says whether that has happened).
const proposedSchema = "testdata/retries.schema.json"

// Ensure schema/retries.schema.json is the proposal JSON() satisfies; a
// skip says the audit's owner has not adopted it yet.
func TestSchemaCommitted(t *testing.T) {
	committed, err := os.ReadFile("../../schema/retries.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	proposed, err := os.ReadFile(proposedSchema)
	if err != nil {
		t.Fatal(err)
	}
	var c, p any
	if err := json.Unmarshal(committed, &c); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(proposed, &p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, p) {
		t.Skipf("schema/retries.schema.json differs from %s: the runner cannot write retries.json until the audit's owner adopts it", proposedSchema)
	}
}

// Ensure JSON() is valid against the retries schema (proposedSchema),
// keeps its field order, and gives the same bytes for the same result.
func TestJSON(t *testing.T) {
	data, err := os.ReadFile(proposedSchema)
	if err != nil {
		t.Fatal(err)
	}
	const id = "https://idemlab.invalid/schema/retries.schema.json"
	c := jsonschema.NewCompiler()
	if err := c.AddResource(id, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Result{sample, {Seed: 1<<64 - 1, Parameters: Default}} {
		doc := r.JSON()
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(v); err != nil {
			t.Errorf("JSON() against the schema: %#v\n%s", err, doc)
		}
		if !bytes.Equal(doc, r.JSON()) {
			t.Error("JSON() differs between two calls")
		}
	}
	want := `{
  "schema_version": 1,
  "seed": 1,
  "parameters": {
    "intents": 200,`
	if got := string(sample.JSON()); !strings.HasPrefix(got, want) {
		t.Errorf("JSON() =\n%s\nwant it to start with\n%s", got, want)
	}
}

// BenchmarkRetries runs the whole experiment: 200 intents, all rows, on
// state folders on disk (real fsync, as the lab runs) and, where the
// machine has one, on tmpfs (/dev/shm), where fsync costs nothing and only
// the experiment's own timing (timeouts, delays, backoff) remains.
func BenchmarkRetries(b *testing.B) {
	roots := []struct{ name, dir string }{{"disk", ""}, {"tmpfs", "/dev/shm"}}
	for _, r := range roots {
		b.Run(r.name, func(b *testing.B) {
			root := b.TempDir()
			if r.dir != "" {
				if fi, err := os.Stat(r.dir); err != nil || !fi.IsDir() {
					b.Skipf("no %s on this machine", r.dir)
				}
				var err error
				if root, err = os.MkdirTemp(r.dir, "retries-bench-"); err != nil {
					b.Fatal(err)
				}
				defer os.RemoveAll(root)
			}
			for b.Loop() {
				if _, err := Run(context.Background(), Config{ServerPath: serverBin, StateRoot: root, Seed: 1, Rows: benchRows}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchRows are the rows BenchmarkRetries runs.
var benchRows = Rows

// Ensure the client-side rows end to end against the real server, each
// with its headline claim: retrying a 4xx only adds refused calls;
// honouring Retry-After sends fewer requests into the refusing gateway;
// the layered clients stay within layer_attempts^layers and layer_attempts
// calls per intent (TestRunLayerRows shows three layers sending more); a key made per attempt duplicates like no key;
// a key kept in a file survives the client's restart, one in memory does
// not.
func TestRunClientRows(t *testing.T) {
	const intents = 60
	rows := Rows[4:]
	res, err := Run(context.Background(), config(t, intents, rows...))
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	by := map[Client]RowResult{}
	for _, row := range res.Rows {
		checkRow(t, row, intents)
		by[row.Client] = row
	}
	t.Logf("\n%s", text(t, res))
	collisions := intents / Default.CollideEvery
	if a, b := by[Retry4xx], by[RetryRetryable]; a.Refused <= b.Refused || b.Refused > collisions || a.Duplicated+b.Duplicated != 0 {
		t.Errorf("retry-4xx refused %d, retry-retryable refused %d (at most %d), duplicated %d and %d; want more refusals from retry-4xx and no duplicates",
			a.Refused, b.Refused, collisions, a.Duplicated, b.Duplicated)
	}
	if a, b := by[IgnoreRetryAfter], by[HonourRetryAfter]; b.Refused >= a.Refused {
		t.Errorf("honour-retry-after refused %d, ignore-retry-after %d: want fewer when honoured", b.Refused, a.Refused)
	}
	if a, b := by[RetryThreeLayers], by[RetryOneLayer]; a.Sent > intents*27 || b.Sent > intents*3 || a.Duplicated+b.Duplicated != 0 {
		t.Errorf("retry-3-layers sent %d (at most %d), retry-1-layer %d (at most %d): want no duplicates", a.Sent, intents*27, b.Sent, intents*3)
	}
	if got := by[RetryNewKey].Duplicated; got == 0 {
		t.Errorf("retry-new-key duplicated %d, want some", got)
	}
	if a, b := by[RestartKeyInMemory], by[RestartKeyInFile]; a.Duplicated == 0 || b.Duplicated != 0 || b.Lost != 0 {
		t.Errorf("restart-key-in-memory duplicated %d (want some); restart-key-in-file lost %d, duplicated %d (want 0, 0)", a.Duplicated, b.Lost, b.Duplicated)
	}
}

// Ensure three retry layers send more calls than one. Both clients draw an
// intent's drops and delays from the same seeded sequence, so they differ
// only on the intents where one layer gave up after layer_attempts
// failures; at the design's 15 % drop that is a handful of 60 intents and
// the rest is timing (a 30 ms timeout against delays of 0-60 ms), which a
// busy machine shifts either way. With 60 % of the attempts dropped by the
// seed about a fifth of the intents exhaust one layer (0.6³), so the
// difference is the seed's, not the scheduler's.
func TestRunLayerRows(t *testing.T) {
	const intents = 60
	cfg := config(t, intents, Row{RetryThreeLayers, protocol.Sound}, Row{RetryOneLayer, protocol.Sound})
	cfg.Parameters.DropPercent = 60
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run() error = %v", err)
	}
	by := map[Client]RowResult{}
	for _, row := range res.Rows {
		checkRow(t, row, intents)
		by[row.Client] = row
	}
	t.Logf("\n%s", text(t, res))
	if a, b := by[RetryThreeLayers], by[RetryOneLayer]; a.Sent <= b.Sent || a.Lost >= b.Lost || a.Duplicated+b.Duplicated != 0 {
		t.Errorf("retry-3-layers sent %d, lost %d; retry-1-layer sent %d, lost %d: want three layers to send more and lose fewer, no duplicates",
			a.Sent, a.Lost, b.Sent, b.Lost)
	}
}

// Ensure the honouring client waits what a server's Retry-After asks for
// and the ignoring one does not: against a test server of this package's
// own that answers the first request of each key 429 with Retry-After: 1
// and then 200, the honouring client's second request comes a second or
// more after its first.
func TestHonourRetryAfter(t *testing.T) {
	var mu sync.Mutex
	first := map[string]time.Time{}
	gaps := map[string]time.Duration{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		k := r.Header.Get(protocol.KeyHeader)
		if at, ok := first[k]; ok {
			gaps[k] = time.Since(at)
			w.WriteHeader(http.StatusOK)
			return
		}
		first[k] = time.Now()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	p := Default
	p.Intents, p.Workers, p.DropPercent, p.MaxServerDelayMS, p.ClientTimeoutMS = 1, 1, 0, 0, 2000
	for _, tt := range []struct {
		client         Client
		atLeast, below time.Duration
	}{{HonourRetryAfter, time.Second, time.Hour}, {IgnoreRetryAfter, 0, time.Second}} {
		stream := slices.Index(Rows, Row{tt.client, protocol.Sound})
		tl, err := drive(context.Background(), p, 1, Row{tt.client, protocol.Sound}, stream, srv.URL, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		gap := gaps[key(stream, 0)]
		if tl.sent != 2 || tl.refused != 1 || gap < tt.atLeast || gap >= tt.below {
			t.Errorf("%s: sent %d, refused %d, second request %v after the first; want 2, 1, in [%v, %v)", tt.client, tl.sent, tl.refused, gap, tt.atLeast, tt.below)
		}
	}
}

package effectserver

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idemlab/internal/effectserver/registry"
	"idemlab/internal/effectserver/servertest"
	"idemlab/internal/pgcluster/pgclustertest"
	"idemlab/internal/protocol"
	"idemlab/internal/store/durable"
	"idemlab/internal/store/open"
)

// fixture is a Server over a temp state folder, served on loopback.
type fixture struct {
	t     *testing.T
	dir   string
	srv   *Server
	http  *httptest.Server
	log   *servertest.Buffer
	exits chan int
	store protocol.Store
	place open.Place

	closeOnce sync.Once
}

func newFixture(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	return newFixtureIn(t, t.TempDir(), edit)
}

// newFixtureIn starts a fixture over the state folder dir, which another
// fixture may share (as two processes would).
func newFixtureIn(t *testing.T, dir string, edit func(*Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: dir, log: new(servertest.Buffer), exits: make(chan int, 16)}
	cfg := Config{
		StateDir: f.dir,
		Addr:     protocol.DefaultAddr,
		Store:    protocol.Volatile,
		Capacity: protocol.DefaultCapacity,
		MaxBody:  protocol.DefaultMaxBody,
		Wait:     protocol.DefaultWait,
		Exit:     func(code int) { f.exits <- code },
	}
	if edit != nil {
		edit(&cfg)
	}
	f.place = place(t, cfg.Store, dir)
	cfg.DSN = f.place.DSN
	srv, err := New(cfg, f.log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.srv = srv
	f.store = cfg.Store
	f.http = httptest.NewServer(srv)
	t.Cleanup(f.close)
	return f
}

// databases maps a test's state folder to the postgres database standing
// in for it, so that fixtures sharing a folder share a database.
var databases sync.Map

// place is where a store of kind keeps the state of folder dir: the folder,
// and for postgres a database of the tests' shared cluster, made for the
// test (the test is skipped where PostgreSQL is not installed).
func place(t *testing.T, kind protocol.Store, dir string) open.Place {
	t.Helper()
	p := open.Place{Dir: dir}
	if !kind.InDatabase() {
		return p
	}
	if dsn, ok := databases.Load(dir); ok {
		p.DSN = dsn.(string)
		return p
	}
	p.DSN = pgclustertest.Database(t)
	databases.Store(dir, p.DSN)
	t.Cleanup(func() { databases.Delete(dir) })
	return p
}

// TestMain runs up to 6 parallel tests at once unless -parallel gives
// another number: the parallel subtests mostly wait on a lease, a fault's delay
// or a database's creation, and the default, GOMAXPROCS, is 2 on the
// lab's machine (20 s alone at 2, most of it waiting).
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.parallel"); f.Value.String() == f.DefValue {
		f.Value.Set("6")
	}
	os.Exit(pgclustertest.Main(m))
}

// close stops the fixture's HTTP server and closes its Server; later calls do nothing.
func (f *fixture) close() {
	f.closeOnce.Do(func() {
		f.http.Close()
		if err := f.srv.Close(); err != nil {
			f.t.Errorf("Close: %v", err)
		}
	})
}

// httpClient never reuses connections: http.Transport would silently resend a
// request carrying an Idempotency-Key after a dropped reply on a reused one.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}

// req describes one request; zero fields mean POST /effect, no key, body add-one.
type req struct {
	method string
	path   string
	key    string
	keys   []string // several Idempotency-Key lines
	fault  string
	body   *string
}

// resp is what came back; status 0 means no reply at all.
type resp struct {
	status   int
	body     string
	replayed string // "" when the header is absent
	allow    string
	ctype    string
}

func (f *fixture) do(r req) resp {
	f.t.Helper()
	method, path, body := http.MethodPost, protocol.EffectPath, "add-one"
	if r.method != "" {
		method = r.method
	}
	if r.path != "" {
		path = r.path
	}
	if r.body != nil {
		body = *r.body
	}
	hr, err := http.NewRequest(method, f.http.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if r.key != "" {
		hr.Header.Set("Idempotency-Key", r.key)
	}
	for _, k := range r.keys {
		hr.Header.Add("Idempotency-Key", k)
	}
	if r.fault != "" {
		hr.Header.Set("X-Lab-Fault", r.fault)
	}
	res, err := httpClient.Do(hr)
	if err != nil {
		return resp{}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		f.t.Fatalf("read reply: %v", err)
	}
	return resp{
		status:   res.StatusCode,
		body:     string(b),
		replayed: res.Header.Get("Idempotency-Replayed"),
		allow:    res.Header.Get("Allow"),
		ctype:    res.Header.Get("Content-Type"),
	}
}

// counter reads the counter from the state folder. The durable store's
// database is read while the fixture's store holds it open: committed
// transactions are what a reader sees.
func (f *fixture) counter() int64 {
	f.t.Helper()
	st := servertest.State(f.t, f.store, f.place)
	if got := int64(len(st.Effects)); got != st.Counter {
		f.t.Fatalf("state has %d effects for counter %d", got, st.Counter)
	}
	return st.Counter
}

// stores lists both stores, for tests that run on each.
var stores = protocol.Stores

// eachStore runs test on a fresh fixture of each store, its Config edited
// by edit (if any).
func eachStore(t *testing.T, edit func(*Config), test func(t *testing.T, f *fixture)) {
	for _, kind := range stores {
		t.Run(string(kind), func(t *testing.T) { test(t, newFixture(t, on(kind, edit))) })
	}
}

// isValue reports whether r is a 200 carrying body, replayed or not.
func (r resp) isValue(body string, replayed bool) bool {
	return r.status == 200 && r.body == body && r.replayed == strconv.FormatBool(replayed)
}

// wantRetryApplies checks what follows a failed effect of key k: a retry
// applies it afresh (200 1, not replayed), and the log has the failure's
// error line.
func (f *fixture) wantRetryApplies() {
	f.t.Helper()
	if got := f.do(req{key: "k"}); !got.isValue("1", false) {
		f.t.Fatalf("retry reply = %+v, want 200 1 not replayed", got)
	}
	if !strings.Contains(f.log.String(), "level=ERROR msg=request") {
		f.t.Errorf("log has no error line for the failed effect:\n%s", f.log)
	}
}

// on returns a Config edit that selects store, then applies edit (if any).
func on(kind protocol.Store, edit func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Store = kind
		if edit != nil {
			edit(c)
		}
	}
}

func str(s string) *string { return &s }

func faults(c *Config) { c.Faults = true }

// Ensure every status code and header of the contract, each on a fresh server.
func TestHandlerContract(t *testing.T) {
	tests := []struct {
		name    string
		config  func(*Config)
		before  []req
		req     req
		want    resp
		counter int64
	}{
		{name: "unkeyed", req: req{},
			want: resp{status: 200, body: "1", replayed: "false"}, counter: 1},
		{name: "unkeyed twice applies twice", before: []req{{}}, req: req{},
			want: resp{status: 200, body: "2", replayed: "false"}, counter: 2},
		{name: "keyed first", req: req{key: "k-1"},
			want: resp{status: 200, body: "1", replayed: "false"}, counter: 1},
		{name: "keyed replay", before: []req{{key: "k-1"}}, req: req{key: "k-1"},
			want: resp{status: 200, body: "1", replayed: "true"}, counter: 1},
		{name: "quoted key is the bare key", before: []req{{key: "k-1"}}, req: req{key: `"k-1"`},
			want: resp{status: 200, body: "1", replayed: "true"}, counter: 1},
		{name: "replay after other effects", before: []req{{key: "a"}, {}, {key: "b"}}, req: req{key: "a"},
			want: resp{status: 200, body: "1", replayed: "true"}, counter: 3},
		{name: "empty body", req: req{key: "k", body: str("")},
			want: resp{status: 200, body: "1", replayed: "false"}, counter: 1},
		{name: "body at limit", req: req{body: str(strings.Repeat("x", 4096))},
			want: resp{status: 200, body: "1", replayed: "false"}, counter: 1},

		{name: "key with space", req: req{key: "bad key"},
			want: resp{status: 400, body: "Idempotency-Key: key has a character outside [A-Za-z0-9_-]\n"}},
		{name: "key too long", req: req{key: strings.Repeat("k", 65)},
			want: resp{status: 400, body: "Idempotency-Key: key longer than 64 characters\n"}},
		{name: "key unbalanced quote", req: req{key: `"abc`},
			want: resp{status: 400, body: "Idempotency-Key: unbalanced quote\n"}},
		{name: "key empty", req: req{keys: []string{""}},
			want: resp{status: 400, body: "Idempotency-Key: empty key\n"}},
		{name: "key on two lines", req: req{keys: []string{"a", "a"}},
			want: resp{status: 400, body: "Idempotency-Key: more than one Idempotency-Key header line\n"}},
		{name: "fault without -faults", req: req{key: "k", fault: "slow"},
			want: resp{status: 400, body: "X-Lab-Fault: faults are disabled (start the server with -faults)\n"}},
		{name: "unknown fault", config: faults, req: req{fault: "dorp"},
			want: resp{status: 400, body: "X-Lab-Fault: unknown fault \"dorp\"\n"}},
		{name: "bad delay", config: faults, req: req{fault: "delay=60001ms"},
			want: resp{status: 400, body: "X-Lab-Fault: bad fault argument \"delay=60001ms\"\n"}},

		{name: "other path", req: req{path: "/nosuch"},
			want: resp{status: 404, body: "not found\n"}},
		{name: "root", req: req{method: "GET", path: "/"},
			want: resp{status: 404, body: "not found\n"}},
		{name: "path before method", req: req{method: "DELETE", path: "/effects"},
			want: resp{status: 404, body: "not found\n"}},
		{name: "GET effect", req: req{method: "GET"},
			want: resp{status: 405, body: "method not allowed\n", allow: "POST"}},
		{name: "PUT effect", req: req{method: "PUT", key: "bad key", fault: "dorp"},
			want: resp{status: 405, body: "method not allowed\n", allow: "POST"}},
		{name: "fault before key", req: req{key: "bad key", fault: "slow"},
			want: resp{status: 400, body: "X-Lab-Fault: faults are disabled (start the server with -faults)\n"}},

		{name: "body over limit", req: req{key: "bad key!", body: str(strings.Repeat("x", 4097))},
			want: resp{status: 400, body: "Idempotency-Key: key has a character outside [A-Za-z0-9_-]\n"}},
		{name: "413", req: req{key: "k", body: str(strings.Repeat("x", 4097))},
			want: resp{status: 413, body: "request body larger than 4096 bytes\n"}},
		{name: "413 small limit", config: func(c *Config) { c.MaxBody = 3 }, req: req{body: str("four")},
			want: resp{status: 413, body: "request body larger than 3 bytes\n"}},
		{name: "422", before: []req{{key: "same"}}, req: req{key: "same", body: str("different")},
			want: resp{status: 422, body: "Idempotency-Key already used with another request body\n"}, counter: 1},
		{name: "429 new key at capacity", config: func(c *Config) { c.Capacity = 2 },
			before: []req{{key: "a"}, {key: "b"}}, req: req{key: "c"},
			want: resp{status: 429, body: "Idempotency-Key registry is full\n"}, counter: 2},
		{name: "existing key replays at capacity", config: func(c *Config) { c.Capacity = 2 },
			before: []req{{key: "a"}, {key: "b"}, {key: "c"}}, req: req{key: "a"},
			want: resp{status: 200, body: "1", replayed: "true"}, counter: 2},
		{name: "unkeyed runs at capacity", config: func(c *Config) { c.Capacity = 1 },
			before: []req{{key: "a"}}, req: req{},
			want: resp{status: 200, body: "2", replayed: "false"}, counter: 2},

		{name: "slow fault", config: faults, req: req{key: "k", fault: "delay=1ms"},
			want: resp{status: 200, body: "1", replayed: "false"}, counter: 1},
		{name: "replay ignores its fault", config: faults, before: []req{{key: "k"}}, req: req{key: "k", fault: "crash-before-effect"},
			want: resp{status: 200, body: "1", replayed: "true"}, counter: 1},
	}
	for _, kind := range stores {
		for _, tt := range tests {
			t.Run(string(kind)+"/"+tt.name, func(t *testing.T) {
				t.Parallel() // each on its own state: a postgres one waits on its database's creation
				f := newFixture(t, on(kind, tt.config))
				for i, b := range tt.before {
					if got := f.do(b); got.status != 200 && got.status != 429 {
						t.Fatalf("before[%d] status = %d (%q), want 200", i, got.status, got.body)
					}
				}
				got := f.do(tt.req)
				if got.ctype != "text/plain; charset=utf-8" {
					t.Errorf("Content-Type = %q, want text/plain; charset=utf-8", got.ctype)
				}
				got.ctype = ""
				if got != tt.want {
					t.Errorf("reply = %+v, want %+v", got, tt.want)
				}
				if got := f.counter(); got != tt.counter {
					t.Errorf("counter = %d, want %d", got, tt.counter)
				}
				if len(f.exits) != 0 {
					t.Errorf("exit called with %d", <-f.exits)
				}
			})
		}
	}
}

// blockOwner makes the owner of key wait, after admission, until the
// returned release is called; admitted is closed once it got there.
func blockOwner(f *fixture, key string) (admitted <-chan struct{}, release func()) {
	adm := make(chan struct{})
	gate := make(chan struct{})
	var once, relOnce sync.Once
	f.srv.admitted = func(k string) {
		if k == key {
			once.Do(func() { close(adm) })
			<-gate
		}
	}
	release = func() { relOnce.Do(func() { close(gate) }) }
	f.t.Cleanup(release)
	return adm, release
}

// inBackground sends r and returns the reply later.
func (f *fixture) inBackground(r req) <-chan resp {
	c := make(chan resp, 1)
	go func() { c <- f.do(r) }()
	return c
}

// Ensure a duplicate waiting longer than -wait gets 409, and the record survives it.
func TestWaitTimeout409(t *testing.T) {
	eachStore(t, func(c *Config) { c.Wait = time.Millisecond }, func(t *testing.T, f *fixture) {
		admitted, release := blockOwner(f, "k")
		owner := f.inBackground(req{key: "k"})
		<-admitted
		if got, want := f.do(req{key: "k"}), (resp{status: 409, body: "request with this Idempotency-Key is still in progress\n", ctype: "text/plain; charset=utf-8"}); got != want {
			t.Fatalf("duplicate reply = %+v, want %+v", got, want)
		}
		if got, want := f.do(req{key: "k", body: str("other")}).status, 422; got != want {
			t.Fatalf("other body while in flight: status = %d, want %d", got, want)
		}
		release()
		if got := <-owner; !got.isValue("1", false) {
			t.Fatalf("owner reply = %+v, want 200 1 not replayed", got)
		}
		if got := f.do(req{key: "k"}); !got.isValue("1", true) {
			t.Fatalf("retry reply = %+v, want 200 1 replayed", got)
		}
		if got := f.counter(); got != 1 {
			t.Fatalf("counter = %d, want 1", got)
		}
	})
}

// Ensure duplicates arriving while the owner is in flight wait and share its result.
func TestDuplicatesShareInFlightResult(t *testing.T) {
	eachStore(t, nil, func(t *testing.T, f *fixture) {
		admitted, release := blockOwner(f, "k")
		owner := f.inBackground(req{key: "k"})
		<-admitted
		var waiting atomic.Int32
		all := make(chan struct{})
		const n = 5
		f.srv.registry.(*registry.Registry).SetOnWaitForTest(func(string) {
			if waiting.Add(1) == n {
				close(all)
			}
		})
		var dups []<-chan resp
		for range n {
			dups = append(dups, f.inBackground(req{key: "k"}))
		}
		<-all
		release()
		if got := <-owner; !got.isValue("1", false) {
			t.Fatalf("owner reply = %+v, want 200 1 not replayed", got)
		}
		for i, d := range dups {
			if got := <-d; !got.isValue("1", true) {
				t.Errorf("duplicate %d reply = %+v, want 200 1 replayed", i, got)
			}
		}
	})
}

// Ensure a failed effect answers 500, is not recorded, and a retry runs it
// (volatile: the state folder is gone; durable: see TestDurableFailedEffect).
func TestFailedEffectReleasesKey(t *testing.T) {
	f := newFixture(t, nil)
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	if got, want := f.do(req{key: "k"}), (resp{status: 500, body: "effect failed\n", ctype: "text/plain; charset=utf-8"}); got != want {
		t.Fatalf("reply with state folder gone = %+v, want %+v", got, want)
	}
	if got, want := f.srv.registry.Len(), 0; got != want {
		t.Fatalf("registry holds %d keys after a failed effect, want %d", got, want)
	}
	if err := os.Mkdir(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f.wantRetryApplies()
}

// Ensure drop-reply applies and records, then closes without a reply.
func TestDropReply(t *testing.T) {
	eachStore(t, faults, func(t *testing.T, f *fixture) {
		if got := f.do(req{key: "k", fault: "drop-reply"}); got.status != 0 {
			t.Fatalf("drop-reply got a reply: %+v", got)
		}
		if got := f.counter(); got != 1 {
			t.Fatalf("counter after drop-reply = %d, want 1", got)
		}
		if got := f.do(req{key: "k"}); !got.isValue("1", true) {
			t.Fatalf("retry reply = %+v, want 200 1 replayed", got)
		}
		if got := f.do(req{fault: "drop-reply"}); got.status != 0 {
			t.Fatalf("unkeyed drop-reply got a reply: %+v", got)
		}
		if got := f.counter(); got != 2 {
			t.Fatalf("counter after unkeyed drop-reply = %d, want 2", got)
		}
	})
}

// Ensure each crash fault calls exit(23) at its point and sends no reply.
// The exit function returns in a test, so the store finishes its work: the
// volatile counter keeps an effect applied before the crash, the durable
// store rolls back a transaction the crash interrupted before its commit.
func TestCrashFaults(t *testing.T) {
	tests := []struct {
		store    protocol.Store
		fault    string
		counter  int64
		recorded bool
	}{
		{protocol.Volatile, "crash-before-effect", 0, false},
		{protocol.Volatile, "crash-after-effect", 1, false},
		{protocol.Volatile, "crash-after-record", 1, true},
		{protocol.Durable, "crash-before-effect", 0, false},
		{protocol.Durable, "crash-after-effect", 0, false},
		{protocol.Durable, "crash-after-record", 1, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.store)+"/"+tt.fault, func(t *testing.T) {
			f := newFixture(t, on(tt.store, faults))
			if got := f.do(req{key: "k", fault: tt.fault}); got.status != 0 {
				t.Fatalf("reply = %+v, want none", got)
			}
			select {
			case code := <-f.exits:
				if code != 23 {
					t.Fatalf("exit code = %d, want 23", code)
				}
			default:
				t.Fatal("exit not called")
			}
			if got := f.counter(); got != tt.counter {
				t.Fatalf("counter = %d, want %d", got, tt.counter)
			}
			// In a test the process lives on: only a recorded result replays.
			got := f.do(req{key: "k"})
			if got.replayed != fmt.Sprint(tt.recorded) {
				t.Fatalf("retry reply = %+v, want replayed %v", got, tt.recorded)
			}
			if !strings.Contains(f.log.String(), "fault="+tt.fault+" status=0 replayed=\"\" outcome=crash") {
				t.Errorf("log lacks the crash line:\n%s", f.log)
			}
		})
	}
}

// Ensure the log has one structured line per request, with the key, fault and status.
func TestLogLinePerRequest(t *testing.T) {
	f := newFixture(t, faults)
	f.do(req{key: "k", fault: "delay=0ms"})
	f.do(req{method: "GET"})
	lines := strings.Split(strings.TrimSpace(f.log.String()), "\n")
	if got, want := len(lines), 2; got != want {
		t.Fatalf("log has %d lines, want %d:\n%s", got, want, f.log)
	}
	for i, want := range []string{
		`msg=request method=POST path=/effect key=k fault="delay=0ms" status=200 replayed=false outcome=reply`,
		`msg=request method=GET path=/effect key="" fault="" status=405 replayed="" outcome=reply`,
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("log line %d = %q, want it to contain %q", i, lines[i], want)
		}
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Ensure an oversized body of unknown length is refused after reading at most limit+1 bytes.
func TestBodyReadIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	body := &countingReader{r: strings.NewReader(strings.Repeat("x", 1<<20))}
	r := httptest.NewRequest(http.MethodPost, protocol.EffectPath, body)
	r.ContentLength = -1
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	if got, want := w.Code, 413; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	if got, limit := body.n, int64(protocol.DefaultMaxBody+1); got > limit {
		t.Fatalf("handler read %d bytes, want at most %d", got, limit)
	}
	if got := f.counter(); got != 0 {
		t.Fatalf("counter = %d, want 0", got)
	}
}

// Ensure hundreds of concurrent requests on one key apply the effect once and share its result.
func TestConcurrentClaimOneEffect(t *testing.T) {
	eachStore(t, nil, func(t *testing.T, f *fixture) {
		const n = 300
		recs := make([]*httptest.ResponseRecorder, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := httptest.NewRequest(http.MethodPost, protocol.EffectPath, strings.NewReader("add-one"))
				r.Header.Set("Idempotency-Key", "parallel")
				recs[i] = httptest.NewRecorder()
				f.srv.ServeHTTP(recs[i], r)
			}()
		}
		wg.Wait()
		fresh := 0
		for i, w := range recs {
			if w.Code != 200 || w.Body.String() != "1" {
				t.Errorf("request %d = %d %q, want 200 1", i, w.Code, w.Body)
			}
			if w.Header().Get("Idempotency-Replayed") == "false" {
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("%d replies not replayed, want exactly 1", fresh)
		}
		if got := f.counter(); got != 1 {
			t.Fatalf("counter = %d, want 1", got)
		}
	})
}

// Ensure New refuses a wrong configuration as a usage error and state it
// cannot use as a refusal, so that the command exits 2 for the one and 3
// for the other.
func TestNewRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "counter-bad")
	if err := os.Mkdir(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "counter"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(dir, "db-bad")
	if err := os.Mkdir(corrupt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corrupt, durable.FileName), []byte(strings.Repeat("garbage ", 1024)), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := Config{StateDir: dir, Addr: protocol.DefaultAddr, Store: protocol.Volatile, Capacity: 1, MaxBody: 1, Wait: time.Second}
	tests := []struct {
		name   string
		edit   func(*Config)
		want   string
		status int
	}{
		{"no state", func(c *Config) { c.StateDir = "" }, "-state is required", ExitUsage},
		{"missing state", func(c *Config) { c.StateDir = filepath.Join(dir, "nosuch") }, "state folder: stat " + filepath.Join(dir, "nosuch") + ": no such file or directory", ExitRefused},
		{"bad counter", func(c *Config) { c.StateDir = bad }, "counter file " + filepath.Join(bad, "counter") + ": malformed content", ExitRefused},
		{"corrupt database", func(c *Config) { c.StateDir = corrupt; c.Store = protocol.Durable }, "durable store " + filepath.Join(corrupt, durable.FileName) + ": file is not a database", ExitRefused},
		{"unknown store", func(c *Config) { c.Store = "nosuch" }, "-store: unknown store \"nosuch\" (want one of volatile, durable, postgres)", ExitUsage},
		{"all interfaces", func(c *Config) { c.Addr = "0.0.0.0:0" }, "-addr 0.0.0.0:0: not a loopback address", ExitUsage},
		{"empty host", func(c *Config) { c.Addr = ":8080" }, "-addr :8080: not a loopback address", ExitUsage},
		{"host name", func(c *Config) { c.Addr = "example.com:80" }, "-addr example.com:80: not a loopback address", ExitUsage},
		{"no port", func(c *Config) { c.Addr = "127.0.0.1" }, "-addr 127.0.0.1: want host:port", ExitUsage},
		{"bad port", func(c *Config) { c.Addr = "127.0.0.1:99999" }, "-addr 127.0.0.1:99999: bad port", ExitUsage},
		{"faults off loopback", func(c *Config) { c.Addr = "0.0.0.0:0"; c.Faults = true }, "-faults: refused with -addr 0.0.0.0:0: not a loopback address", ExitUsage},
		{"capacity", func(c *Config) { c.Capacity = 0 }, "-capacity 0: want at least 1", ExitUsage},
		{"max body", func(c *Config) { c.MaxBody = -1 }, "-max-body -1: want 0 or more", ExitUsage},
		{"wait", func(c *Config) { c.Wait = 0 }, "-wait 0s: want more than 0", ExitUsage},
	}
	for _, tt := range tests {
		cfg := ok
		tt.edit(&cfg)
		_, err := New(cfg, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: New error = %v, want prefix %q", tt.name, err, tt.want)
			continue
		}
		if got := ExitStatus(err); got != tt.status {
			t.Errorf("%s: ExitStatus(%T) = %d, want %d", tt.name, err, got, tt.status)
		}
	}
}

// Ensure the loopback check accepts exactly loopback literals and localhost.
func TestLoopback(t *testing.T) {
	tests := []struct{ in, want string }{
		{"127.0.0.1:0", "127.0.0.1:0"},
		{"127.1.2.3:8080", "127.1.2.3:8080"},
		{"[::1]:0", "[::1]:0"},
		{"localhost:0", "127.0.0.1:0"},
		{"[::ffff:127.0.0.1]:0", "127.0.0.1:0"},
		{"0.0.0.0:0", ""},
		{"[::]:0", ""},
		{"10.0.0.1:0", ""},
		{"[fe80::1%lo]:0", ""},
		{"localhost.:0", ""},
		{"127.0.0.1:-1", ""},
		{"127.0.0.1:08", ""},
	}
	for _, tt := range tests {
		got, err := loopback(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("loopback(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("loopback(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
}

// Ensure clip keeps a field up to its bound whole and cuts a longer one
// to the bound, marked with its length.
func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 4, ""},
		{"abcd", 4, "abcd"},
		{"abcde", 4, "abcd...(5 bytes)"},
		{strings.Repeat("p", 1<<20), maxLogField, strings.Repeat("p", maxLogField) + "...(1048576 bytes)"},
	}
	for _, tt := range tests {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("clip(%d bytes, %d) = %.40q (%d bytes), want %.40q", len(tt.in), tt.n, got, len(got), tt.want)
		}
	}
}

// Package sinktest is the one test target of the lab's tests: the test
// binary re-executed as a tiny HTTP service the lab did not write, whose
// handler performs its effect through the sink the way docs/targets.md
// asks a target to. A test binary that uses it calls Main (or IsTarget and
// Serve) from its TestMain.
//
// A Service says which tiny service it is: a bare forwarder, or a keyed
// service keeping its keys in memory or in a file in STATE, with or
// without a deliberate flaw. Tests start it directly (StartTarget: the
// sink's and the proxy's tests) or have the lab start it from the
// target.json that WriteTarget and LoadTarget write (caserun, chaos,
// runner). Every target process carries this test binary's mark on its
// command line, so that Leftovers and CheckNoneLeft can tell a test
// whether any process it started outlived it (procs.go).
//
// It is a package of its own so that nothing but tests links package
// testing.
package sinktest

import (
	"bytes"
	"encoding/json"
	"errors"
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
)

// Keys says where a service keeps its idempotency keys.
type Keys string

// The key tables.
const (
	// NoKeys: a bare forwarder; every request is a new effect.
	NoKeys Keys = ""
	// Memory: a table in the process, lost when it dies.
	Memory Keys = "memory"
	// File: a table in STATE/keys.json, written before the reply, that
	// survives a restart (the service claims a durable store).
	File Keys = "file"
)

// Flaw is a deliberate bug of a keyed service.
type Flaw string

// The flaws.
const (
	Sound Flaw = "" // no flaw
	// CheckThenSet: a key is checked on arrival but set only once its
	// effect is done, so duplicates that arrive while the first attempt is
	// at the sink each apply the effect again.
	CheckThenSet Flaw = "check-then-set"
	// StuckOnFailure: a failed effect leaves its key in flight (409 for
	// ever) instead of freeing it.
	StuckOnFailure Flaw = "stuck-on-failure"
)

// A Service is one variant of the tiny service. Its handler, on any path
// and method:
//   - with keys and an Idempotency-Key: replays a key done (X-Replayed:
//     yes, the value it answered) and answers 409 with Retry-After: 1 for a
//     key in flight; a new key is marked in flight (see Flaw);
//   - POSTs the request's body to EFFECT_URL (with the request's
//     Idempotency-Key if ForwardKey), and answers 200 with the sink's body
//     (X-Replayed: no), recording it under the key first; a sink reply
//     other than 200 it answers with 502 and "sink STATUS: BODY", freeing
//     the key. With no EFFECT_URL the effect's value is "ok";
//   - with a MARKER file, writes the value it is about to answer there
//     first, so that a test can tell that the reply was produced even when
//     it never arrived.
//
// It listens on 127.0.0.1:PORT (a free port without PORT), prints "READY
// PORT" once it does, and serves until it is killed; it leaves SIGTERM's
// default action alone, so a stop ends it with signal 15 (exit code 143).
type Service struct {
	Name       string // in target.json; "" for "tiny"
	Keys       Keys
	Flaw       Flaw
	ForwardKey bool // forward the request's Idempotency-Key to the sink
	// WrapBody: the service calls the sink with the request's body
	// wrapped ({"payment":BODY}), not as the client sent it, so that no
	// fault the lab arms at the sink for the client's body fires.
	WrapBody bool
}

// The environment a target reads its Service from.
const (
	keysEnv    = "SINKTEST_KEYS"
	flawEnv    = "SINKTEST_FLAW"
	forwardEnv = "SINKTEST_FORWARD_KEY"
	wrapEnv    = "SINKTEST_WRAP_BODY"
)

// env is svc as the target's environment (without EFFECT_URL, STATE,
// MARKER, PORT).
func (svc Service) env() map[string]string {
	m := map[string]string{keysEnv: string(svc.Keys), flawEnv: string(svc.Flaw)}
	if svc.ForwardKey {
		m[forwardEnv] = "1"
	}
	if svc.WrapBody {
		m[wrapEnv] = "1"
	}
	return m
}

// Bounds of the target.
const (
	readyWithin = 30 * time.Second // from start to its READY line
	maxBody     = 8 << 20          // a request body it reads
	sinkTimeout = 3 * time.Minute  // its call to the sink, longer than any sink wait
)

// Main runs the target instead of the tests when the test binary was
// started as one; otherwise it runs the tests. Call it as
// os.Exit(sinktest.Main(m)) from TestMain; a TestMain with work of its
// own asks IsTarget first and then calls Serve.
func Main(m *testing.M) int {
	if IsTarget() {
		return Serve()
	}
	return m.Run()
}

// IsTarget reports whether this test binary was started as a target.
func IsTarget() bool {
	return len(os.Args) == 2 && strings.HasPrefix(os.Args[1], markPrefix)
}

// Serve runs the target the environment describes until it is killed, and
// returns the exit code for os.Exit if it cannot.
func Serve() int {
	if err := serve(); err != nil {
		fmt.Fprintf(os.Stderr, "target: %v\n", err)
	}
	return 1
}

func serve() error {
	svc := Service{Keys: Keys(os.Getenv(keysEnv)), Flaw: Flaw(os.Getenv(flawEnv)), ForwardKey: os.Getenv(forwardEnv) == "1", WrapBody: os.Getenv(wrapEnv) == "1"}
	h := &handler{svc: svc, effectURL: os.Getenv("EFFECT_URL"), marker: os.Getenv("MARKER"),
		client: &http.Client{Timeout: sinkTimeout}}
	switch svc.Keys {
	case NoKeys:
	case Memory, File:
		h.keys = &table{flaw: svc.Flaw, done: map[string]string{}, inFlight: map[string]bool{}}
		if svc.Keys == File {
			if err := h.keys.load(filepath.Join(os.Getenv("STATE"), "keys.json")); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%s=%q: want %q, %q or none", keysEnv, svc.Keys, Memory, File)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", os.Getenv("PORT")))
	if err != nil {
		return err
	}
	fmt.Printf("READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	return http.Serve(ln, h)
}

type handler struct {
	svc       Service
	keys      *table // nil: no keys
	effectURL string
	marker    string
	client    *http.Client
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	keyed := h.keys != nil && key != ""
	if keyed {
		value, done, busy := h.keys.claim(key)
		switch {
		case done:
			w.Header().Set("X-Replayed", "yes")
			io.WriteString(w, value)
			return
		case busy:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
			return
		}
	}
	var forward []string
	if h.svc.ForwardKey {
		forward = r.Header.Values("Idempotency-Key")
	}
	value, err := h.effect(body, forward)
	if keyed {
		if err := h.keys.settle(key, value, err != nil); err != nil {
			http.Error(w, "keys: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if h.marker != "" {
		if err := os.WriteFile(h.marker, []byte(value), 0o644); err != nil {
			http.Error(w, "marker: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Replayed", "no")
	io.WriteString(w, value)
}

// effect POSTs body to the sink and returns its value, or an error saying
// why there is none: "sink: ERR", or "sink STATUS: BODY" for a reply other
// than 200. With no sink the value is "ok".
func (h *handler) effect(body []byte, key []string) (string, error) {
	if h.effectURL == "" {
		return "ok", nil
	}
	if h.svc.WrapBody {
		body = append(append([]byte(`{"payment":`), body...), '}')
	}
	req, err := http.NewRequest(http.MethodPost, h.effectURL, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("sink: %w", err)
	}
	if len(key) > 0 {
		req.Header["Idempotency-Key"] = key
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("sink: %w", err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("sink: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("sink %d: %s", resp.StatusCode, got)
	}
	return string(got), nil
}

// table is a keyed service's keys: the values of keys done and the keys in
// flight; with a file, the keys done are written to it before each reply.
type table struct {
	flaw     Flaw
	file     string // "" in memory
	mu       sync.Mutex
	done     map[string]string
	inFlight map[string]bool
}

// load reads the keys done from file, if it exists, and keeps file.
func (t *table) load(file string) error {
	t.file = file
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, &t.done)
}

// claim returns the value of a key done, or says the key is in flight, or
// marks it in flight (unless the flaw is CheckThenSet) for the caller.
func (t *table) claim(key string) (value string, done, busy bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.done[key]; ok {
		return v, true, false
	}
	if t.inFlight[key] {
		return "", false, true
	}
	if t.flaw != CheckThenSet {
		t.inFlight[key] = true
	}
	return "", false, false
}

// settle records the value of a key whose effect is done, or frees the key
// of a failed effect (unless the flaw is StuckOnFailure).
func (t *table) settle(key, value string, failed bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if failed {
		if t.flaw != StuckOnFailure {
			delete(t.inFlight, key)
		}
		return nil
	}
	delete(t.inFlight, key)
	t.done[key] = value
	if t.file == "" {
		return nil
	}
	b, err := json.Marshal(t.done)
	if err != nil {
		return err
	}
	if err := os.WriteFile(t.file+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(t.file+".tmp", t.file)
}

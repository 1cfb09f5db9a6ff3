// Package effectserver is the lab's HTTP server: POST /effect applies a
// durable side effect (counter + 1) at most once per Idempotency-Key, with
// lab faults injected on request.
//
// Handling one POST /effect, in order: path (404), method (405),
// X-Lab-Fault (400), Idempotency-Key (400), body size (413), then the claim
// of the key in a registry.Table (422 other body, 409 owner still in
// flight after the wait, 429 registry full; a recorded result replays),
// then, for the owner or an unkeyed request, the fault hooks and the effect
// through a Store. A store shared with other processes (durable) answers
// from its own record where the registry could not: a key another process
// recorded replays, or gets 422, and a new key beyond capacity gets 429.
//
// With Config.Downstream the effect is a call to another effect server
// (the ledger) and a keyed request passes three recovery points, each its
// own transaction in a store.Phased: claim (with a lease), the call,
// complete (see downstream.go). With Config.KeyTTL a recorded key expires.
//
// The wire contract (path, headers, key syntax, defaults) is package
// protocol's; the stores are package store's implementations, opened by
// name through open. The server disables keep-alives: see protocol's
// client for why a lab client must too.
package effectserver

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"idemlab/internal/client"
	"idemlab/internal/effectserver/registry"
	"idemlab/internal/effectserver/unsaferegistry"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
	"idemlab/internal/store/open"
)

// Config is what the server is started with.
type Config struct {
	StateDir string         // state folder of an embedded store; must exist and be writable
	DSN      string         // the database of a database store (postgres)
	Addr     string         // loopback listen address, host:port
	Store    protocol.Store // which store keeps the effect and the keys
	Capacity int            // most keys held, in-flight ones included
	MaxBody  int64          // largest accepted body, in bytes
	Wait     time.Duration  // how long a duplicate waits for an in-flight owner
	Faults   bool           // honour X-Lab-Fault

	// ReadState, when set, prints what the store holds instead of
	// serving (ReadStateJSON or ReadStateCounter) and exits.
	ReadState string

	// Downstream, when set, is the effect URL of another effect server
	// (the ledger): the effect becomes a POST to it, and the reply value
	// is the ledger's (see downstream.go).
	Downstream string
	// ForwardKey sends the ledger a key derived from the request's
	// (ForwardedKey); false sends none.
	ForwardKey bool
	// Service scopes the forwarded key (ForwardedKey), so that two
	// upstream services cannot collide at one ledger; replicas of one
	// service share it.
	Service string
	// Lease is how long a claim of the downstream mode holds its key
	// before another request may take it over.
	Lease time.Duration
	// KeyTTL, when more than 0, makes a recorded key expire that long
	// after it was recorded: a retry after it is a new effect, and the
	// key no longer takes a place. 0 keeps keys for ever.
	KeyTTL time.Duration

	// UnsafeRegistry, when not protocol.Sound, names a flaw to build into
	// the key registry on purpose (only with Faults): the lab's mutation
	// runs prove its cases catch each classic registry bug.
	UnsafeRegistry protocol.Flaw

	// Exit ends the process when a crash fault fires; nil means os.Exit.
	// Tests replace it to observe a crash without dying.
	Exit func(code int)
}

// A Server handles the lab's HTTP requests. Use New, then serve it with
// net/http, or use Run.
type Server struct {
	cfg      Config
	listen   string // cfg.Addr with localhost resolved to 127.0.0.1
	store    store.Store
	registry registry.Table
	log      *slog.Logger
	exit     func(int)

	// phased holds the downstream mode's claims (nil without Downstream):
	// the store's when it is a store.Phased, else an in-memory
	// registry.Claims (the volatile store).
	phased store.Phased
	// ledger is the client of the downstream calls.
	ledger *client.Client

	// admitted, when set by a test, is called when a request has been
	// admitted (became the owner of its key, or is unkeyed), before faults.
	admitted func(key string)

	// cut is closed when the shutdown grace ends (Run): fault sleeps still
	// running end, and no new effect starts.
	cut     chan struct{}
	cutOnce sync.Once
	// inflight counts the requests being handled, for Run to wait on
	// after it cut them.
	inflight tracker
}

// New checks cfg, opens its store and returns a Server logging to stderr.
// An error is a *UsageError (cfg is wrong) or a *RefusedError (the state
// it names cannot be used).
func New(cfg Config, stderr io.Writer) (*Server, error) {
	listen, err := check(cfg)
	if err != nil {
		return nil, &UsageError{err}
	}
	reg, err := unsaferegistry.New(cfg.UnsafeRegistry, cfg.Capacity) // the sound registry unless told
	if err != nil {
		return nil, &UsageError{err}
	}
	st, err := open.Store(cfg.Store, open.Place{Dir: cfg.StateDir, DSN: cfg.DSN}, cfg.Capacity, cfg.Wait)
	if err != nil {
		return nil, &RefusedError{err}
	}
	if cfg.UnsafeRegistry != protocol.Sound {
		fmt.Fprintf(stderr, "WARNING: UNSAFE REGISTRY %q: this server has a deliberate idempotency bug, for the lab's mutation runs only\n", cfg.UnsafeRegistry)
	}
	phased, err := expire(cfg, st, reg)
	if err != nil {
		st.Close()
		return nil, err
	}
	exit := cfg.Exit
	if exit == nil {
		exit = os.Exit
	}
	s := &Server{
		cfg:      cfg,
		listen:   listen,
		store:    st,
		registry: reg,
		phased:   phased,
		ledger:   client.New(protocol.DefaultClientTimeout),
		log:      slog.New(slog.NewTextHandler(stderr, nil)),
		exit:     exit,
		cut:      make(chan struct{}),
	}
	if r, ok := st.(store.Repairer); ok {
		for _, what := range r.Repairs() {
			s.log.Warn("state repaired", "what", what)
		}
	}
	return s, nil
}

// expire gives the key TTL to the registry and the store, loads the keys
// the store kept into the registry (with the time each was recorded, when
// the store keeps it), and returns the downstream mode's claims, if any.
// An error is a *UsageError or a *RefusedError.
func expire(cfg Config, st store.Store, reg registry.Table) (store.Phased, error) {
	if cfg.KeyTTL > 0 {
		r, ok := reg.(interface{ SetKeyTTL(time.Duration) })
		if !ok {
			return nil, &UsageError{errors.New("-key-ttl: this registry cannot expire keys")}
		}
		r.SetKeyTTL(cfg.KeyTTL)
	}
	exp, timed := st.(store.Expiring)
	restoreAt, canAt := reg.(interface {
		RestoreAt(string, store.Fingerprint, int64, time.Time) error
	})
	switch {
	case cfg.KeyTTL > 0 && timed && canAt:
		exp.SetKeyTTL(cfg.KeyTTL)
		recorded, err := exp.RecordedWithTimes()
		if err != nil {
			return nil, &RefusedError{fmt.Errorf("load recorded keys: %w", err)}
		}
		for _, rec := range recorded {
			if err := restoreAt.RestoreAt(rec.Key, rec.Fingerprint, rec.Value, rec.RecordedAt); err != nil {
				return nil, &RefusedError{fmt.Errorf("load recorded key %q: %w", rec.Key, err)}
			}
		}
	default:
		recorded, err := st.Recorded()
		if err != nil {
			return nil, &RefusedError{fmt.Errorf("load recorded keys: %w", err)}
		}
		if n := len(recorded); n > cfg.Capacity {
			return nil, &RefusedError{fmt.Errorf("-capacity %d: the state holds %d recorded keys; start with -capacity %d or more", cfg.Capacity, n, n)}
		}
		for _, rec := range recorded {
			if err := reg.Restore(rec.Key, rec.Fingerprint, rec.Value); err != nil {
				return nil, &RefusedError{fmt.Errorf("load recorded key %q: %w", rec.Key, err)}
			}
		}
	}
	if cfg.Downstream == "" {
		return nil, nil
	}
	if p, ok := st.(store.Phased); ok {
		return p, nil
	}
	c := registry.NewClaims(cfg.Capacity) // volatile: claims in memory only
	c.SetKeyTTL(cfg.KeyTTL)
	return c, nil
}

// check validates cfg and returns the address to listen on.
func check(cfg Config) (string, error) {
	if _, err := protocol.ParseStore(string(cfg.Store)); err != nil {
		return "", fmt.Errorf("-store: %w", err)
	}
	switch db := cfg.Store.InDatabase(); {
	case db && cfg.DSN == "":
		return "", fmt.Errorf("-store %s: -dsn URL is required (the database its replicas share)", cfg.Store)
	case !db && cfg.DSN != "":
		return "", fmt.Errorf("-dsn: only with -store %s (-store %s keeps its state in -state)", protocol.Postgres, cfg.Store)
	case !db && cfg.StateDir == "":
		return "", errors.New("-state is required")
	}
	if cfg.ReadState != "" {
		if cfg.ReadState != ReadStateJSON && cfg.ReadState != ReadStateCounter {
			return "", fmt.Errorf("-read-state %q: want %s or %s", cfg.ReadState, ReadStateJSON, ReadStateCounter)
		}
		return "", nil
	}
	listen, err := loopback(cfg.Addr)
	if err != nil {
		if cfg.Faults {
			return "", fmt.Errorf("-faults: refused with -addr %s: %w", cfg.Addr, err)
		}
		return "", fmt.Errorf("-addr %s: %w", cfg.Addr, err)
	}
	if cfg.Capacity < 1 {
		return "", fmt.Errorf("-capacity %d: want at least 1", cfg.Capacity)
	}
	if cfg.MaxBody < 0 {
		return "", fmt.Errorf("-max-body %d: want 0 or more", cfg.MaxBody)
	}
	if cfg.Wait <= 0 {
		return "", fmt.Errorf("-wait %s: want more than 0", cfg.Wait)
	}
	if err := checkDownstream(cfg); err != nil {
		return "", err
	}
	if cfg.UnsafeRegistry != protocol.Sound {
		switch {
		case cfg.Downstream != "":
			return "", fmt.Errorf("-unsafe-registry %s: not with -downstream (the downstream mode keeps claims, not the registry's tickets)", cfg.UnsafeRegistry)
		case cfg.KeyTTL > 0:
			return "", fmt.Errorf("-unsafe-registry %s: not with -key-ttl", cfg.UnsafeRegistry)
		}
		if _, err := protocol.ParseFlaw(string(cfg.UnsafeRegistry)); err != nil {
			return "", fmt.Errorf("-unsafe-registry: %w", err)
		}
		if !cfg.Faults {
			return "", fmt.Errorf("-unsafe-registry %s: only together with -faults (it is a lab fault)", cfg.UnsafeRegistry)
		}
	}
	return listen, nil
}

// loopback checks that addr is host:port with host an IP literal in
// 127.0.0.0/8, ::1, or localhost, and returns it with localhost resolved.
func loopback(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", errors.New("want host:port")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || strconv.FormatUint(n, 10) != port {
		return "", errors.New("bad port (want 0..65535)")
	}
	if host == "localhost" {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" || !ip.Unmap().IsLoopback() {
		return "", errors.New("not a loopback address (want 127.0.0.0/8, ::1 or localhost)")
	}
	return net.JoinHostPort(ip.Unmap().String(), port), nil
}

// Close releases the server's store.
func (s *Server) Close() error { return s.store.Close() }

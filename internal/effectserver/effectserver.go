// Package effectserver is the lab's HTTP server: POST /effect applies a
// durable side effect (counter + 1) at most once per Idempotency-Key, with
// lab faults injected on request. A keyed request is claimed in a
// registry.Table, then the owner's faults fire and the effect runs
// through a store; a store shared with other processes answers from its
// own record where this process's registry could not. With
// Config.Downstream the effect is a call to another effect server. The
// server disables keep-alives, as a lab client must (see package client).
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

	ReadState string // print the store's state in this format instead of serving

	// The downstream mode: the effect is a POST to the ledger at Downstream.
	Downstream string
	ForwardKey bool          // send the ledger ForwardedKey(Service, key)
	Service    string        // scopes the forwarded key; replicas share it
	Lease      time.Duration // how long a claim holds its key
	KeyTTL     time.Duration // a recorded key expires this long after (0: never)

	// UnsafeRegistry, when not protocol.Sound, builds a flaw into the key
	// registry on purpose (only with Faults), for the lab's mutation runs.
	UnsafeRegistry protocol.Flaw

	// Exit ends the process when a crash fault fires; nil means os.Exit.
	Exit func(code int)
}

// A Server handles the lab's HTTP requests.
type Server struct {
	cfg      Config
	listen   string // cfg.Addr with localhost resolved to 127.0.0.1
	store    store.Store
	registry registry.Table
	log      *slog.Logger
	exit     func(int)

	phased store.Phased   // the downstream mode's claims; nil without it
	ledger *client.Client // the downstream calls'

	// admitted, set by a test, is called once a request is admitted.
	admitted func(key string)

	// cut is closed when the shutdown grace ends: fault sleeps end, and
	// no new effect starts.
	cut      chan struct{}
	cutOnce  sync.Once
	inflight tracker
}

// New checks cfg, opens its store and returns a Server logging to stderr.
// An error is a *UsageError or a *RefusedError.
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
// the store kept into the registry, and returns the downstream mode's
// claims, if any.
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

// loopback checks that addr is a loopback host:port, and returns it with
// localhost resolved.
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

package effectserver

// This file runs a Server as a process does: listen, announce READY, serve
// until told to stop, shut down within a grace period. It also bounds what
// a client can hold: the time to send a request, and the connections open
// at once.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
	"idemlab/internal/store/open"
)

// The limits Run puts on clients.
const (
	// maxHeaderBytes bounds a request's line and headers together:
	// http.Server.MaxHeaderBytes, so more gets 431 from net/http itself
	// (before any handler, so without a log line). net/http reads up to
	// 4096 bytes beyond it before it refuses (its buffering's slack). Lab
	// clients send well under 1 KiB; a probe's 1 MiB header and 10,000
	// headers were served under Go's default of 1 MiB.
	maxHeaderBytes = 16 << 10

	// requestReadTimeout bounds how long a client may take to send its
	// whole request, headers and body, counted from the moment the server
	// starts reading it (when its connection is accepted). Lab clients send at once on loopback; a
	// client that stalls is cut (400 if its headers had arrived, else the
	// connection is closed). It bounds reading only: delay faults and a
	// duplicate's wait for its owner come after the request is read.
	requestReadTimeout = 3 * time.Second

	// maxConns caps the connections served at once, well below common
	// open-file limits (256, 1024) so that the store's files always open.
	// Accept waits for a free slot: a connection beyond the cap waits in
	// the kernel's accept backlog, holding no descriptor of this process,
	// and is accepted, in arrival order, once another closes. It is not
	// refused: a lab client would see a refusal as a fault the lab did not
	// inject. So its wait is what the connections ahead of it take: a
	// client stalling its request holds a slot up to requestReadTimeout
	// from its accept, and behind N such stallers a connection waits up to
	// N/maxConns (rounded down) read timeouts (500 stallers: 3 x 3 s,
	// measured 9.03 s); a request being handled (a delay or stall fault, a
	// duplicate waiting for its owner) holds its slot as long as that takes.
	maxConns = 128

	// shutdownGrace bounds how long a graceful shutdown waits for
	// requests in flight. When it ends, the fault sleeps still running
	// (stall, delay) are cut, whatever they asked for: a cut stall fails
	// its store's afterEffect hook, so a store with a transaction rolls
	// the intent back (durable, postgres) and the key is released. The
	// connections still open are closed, and the shutdown is still clean.
	shutdownGrace = 10 * time.Second

	// cutWithin bounds how long a shutdown waits, after the grace, for the
	// requests it cut to roll back and end, before the store is closed.
	// A rollback takes milliseconds; a request still running then is one
	// blocked in its store (a postgres lock wait, bounded by -wait).
	cutWithin = 2 * time.Second
)

// limits are the bounds run serves with; tests shrink them.
type limits struct {
	read  time.Duration // requestReadTimeout
	conns int           // maxConns
	grace time.Duration // shutdownGrace
}

var defaultLimits = limits{read: requestReadTimeout, conns: maxConns, grace: shutdownGrace}

// Run starts a server for cfg, prints "READY host:port\n" on stdout once it
// accepts connections, logs to stderr, and serves until ctx ends, then shuts
// down within the grace period, whatever its clients do, and returns nil.
// A *UsageError means cfg is wrong; a *RefusedError that the state it
// names or the listen address cannot be used (ExitStatus maps each to the
// command's exit status); any other error means the server failed. A crash
// fault ends the process (cfg.Exit) without returning.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if cfg.ReadState != "" {
		return PrintState(cfg, stdout)
	}
	return run(ctx, cfg, stdout, stderr, defaultLimits)
}

// The formats of -read-state.
const (
	ReadStateJSON    = "json"    // store.State as JSON: the counter and the journal
	ReadStateCounter = "counter" // the counter alone
)

// PrintState writes what the store cfg names holds, in cfg.ReadState's
// format: how the runner reads a store after its servers exited without
// linking any store engine itself. A state it refuses is a *RefusedError.
func PrintState(cfg Config, out io.Writer) error {
	if _, err := check(cfg); err != nil {
		return &UsageError{err}
	}
	st, err := open.ReadState(cfg.Store, open.Place{Dir: cfg.StateDir, DSN: cfg.DSN})
	if err != nil {
		return &RefusedError{err}
	}
	if cfg.ReadState == ReadStateCounter {
		_, err = fmt.Fprintln(out, st.Counter)
	} else {
		if st.Effects == nil {
			st.Effects = []store.Effect{}
		}
		err = json.NewEncoder(out).Encode(st)
	}
	if err != nil {
		return fmt.Errorf("print state: %w", err)
	}
	return nil
}

func run(ctx context.Context, cfg Config, stdout, stderr io.Writer, lim limits) error {
	s, err := New(cfg, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	inner, err := net.Listen("tcp", s.listen)
	if err != nil {
		return &RefusedError{fmt.Errorf("-addr %s: %w", cfg.Addr, err)}
	}
	ln := protocol.NewLimitListener(inner, lim.conns)
	hs := &http.Server{
		Handler: s,
		// The whole request, headers and body, must arrive within
		// lim.read of the start of reading it. net/http lifts the deadline
		// once the body is read, so it does not cut short a handler that
		// waits (a delay fault, a duplicate waiting for its owner).
		ReadHeaderTimeout: lim.read,
		MaxHeaderBytes:    maxHeaderBytes,
		ReadTimeout:       lim.read,
		IdleTimeout:       lim.read, // no keep-alives, so never idle; set should they return
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	// No keep-alives: see the package comment.
	hs.SetKeepAlivesEnabled(false)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	s.log.Info("start", "addr", ln.Addr().String(), "store", cfg.Store, "capacity", cfg.Capacity,
		"max_body", cfg.MaxBody, "wait", cfg.Wait, "faults", cfg.Faults)
	if _, err := fmt.Fprintf(stdout, "READY %s\n", ln.Addr()); err != nil {
		hs.Close()
		return fmt.Errorf("print READY: %w", err)
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("shutdown")
	sctx, cancel := context.WithTimeout(context.Background(), lim.grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		// Past the grace period: fault sleeps are cut, whatever the
		// clients still hold is closed, and the shutdown is still the
		// clean one asked for, once the cut requests have rolled back.
		s.cutOnce.Do(func() { close(s.cut) })
		hs.Close()
		s.log.Warn("shutdown: cut the requests in flight and closed the connections still open", "grace", lim.grace, "err", err)
		if !s.inflight.wait(cutWithin) {
			s.log.Warn("shutdown: requests still running after the cut", "waited", cutWithin)
		}
	}
	s.log.Info("stopped")
	return nil
}

// tracker counts the requests being handled.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n comes to 0, while wait waits
}

func (t *tracker) enter() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n++
}

func (t *tracker) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// wait waits up to d for no request to be in flight, and reports whether
// none is.
func (t *tracker) wait(d time.Duration) bool {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return true
	}
	idle := make(chan struct{})
	t.idle = idle
	t.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-idle:
		return true
	case <-timer.C:
		return false
	}
}

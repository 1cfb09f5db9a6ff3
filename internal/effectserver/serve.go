package effectserver

// Running a Server as a process does, with bounds on what a client can hold.

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
	// maxHeaderBytes bounds a request's line and headers (431 from
	// net/http, with up to 4096 bytes of slack); Go's default of 1 MiB
	// served a probe's 1 MiB header.
	maxHeaderBytes = 16 << 10

	// requestReadTimeout bounds sending the whole request, from accept. It
	// bounds reading only: delay faults and a duplicate's wait come after.
	requestReadTimeout = 3 * time.Second

	// maxConns caps the connections served at once, well below common
	// open-file limits so the store's files always open. A connection
	// beyond it waits in the kernel's accept backlog, never refused (a lab
	// client would see a fault the lab did not inject): behind N stalling
	// clients it waits N/maxConns read timeouts.
	maxConns = 128

	// shutdownGrace bounds a graceful shutdown's wait for requests in
	// flight; then fault sleeps are cut (a cut stall fails afterEffect, so
	// a transactional store rolls the intent back) and connections closed.
	shutdownGrace = 10 * time.Second

	// cutWithin bounds the wait, after the grace, for cut requests to roll
	// back before the store is closed.
	cutWithin = 2 * time.Second
)

// limits are the bounds run serves with; tests shrink them.
type limits struct {
	read  time.Duration // requestReadTimeout
	conns int           // maxConns
	grace time.Duration // shutdownGrace
}

var defaultLimits = limits{read: requestReadTimeout, conns: maxConns, grace: shutdownGrace}

// Run starts a server for cfg, prints "READY host:port\n" once it accepts
// connections, and serves until ctx ends, then shuts down within the grace
// period and returns nil. A *UsageError means cfg is wrong, a
// *RefusedError that its state or address cannot be used.
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
// format: how the runner reads a store without linking any store engine.
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
		// net/http lifts the read deadline once the body is read, so it
		// does not cut a handler that waits.
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

// wait waits up to d for no request in flight, and reports whether none is.
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

package effectserver

// This file runs a Server as a process does: listen, announce READY, serve
// until told to stop, shut down within a grace period.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// shutdownGrace bounds how long a graceful shutdown waits for requests in
// flight before closing them.
const shutdownGrace = 10 * time.Second

// Run starts a server for cfg, prints "READY host:port\n" on stdout once it
// accepts connections, logs to stderr, and serves until ctx ends, then shuts
// down gracefully and returns nil. A *StartError means cfg or the state
// folder cannot be used; any other error means the server failed. A crash
// fault ends the process (cfg.Exit) without returning.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	s, err := New(cfg, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
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
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

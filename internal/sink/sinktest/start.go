package sinktest

// This file is what the sink's and the proxy's tests share about the
// servers they start: closed when a test ends, Close bounded, and a Start
// that must refuse its config.

import (
	"io"
	"strings"
	"testing"
	"time"
)

// CloseAtEnd closes s, a server the test started, when t ends, failing t
// if Close fails.
func CloseAtEnd(t testing.TB, s io.Closer) {
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
}

// CloseWithin closes s and fails t unless Close returns nil within d.
func CloseWithin(t testing.TB, s io.Closer, d time.Duration) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatalf("Close did not return within %v", d)
	}
}

// WantRefused fails t unless Start refused cfg (err) with an error
// containing want; a server it started anyway (s) is closed.
func WantRefused[S io.Closer](t testing.TB, cfg any, s S, err error, want string) {
	t.Helper()
	if err == nil {
		s.Close()
		t.Errorf("Start(%+v) succeeded, want %q", cfg, want)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Start(%+v) = %v, want %q", cfg, err, want)
	}
}

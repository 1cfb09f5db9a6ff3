package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"idemlab/internal/protocol"
	"idemlab/internal/serverproc"
	"idemlab/internal/store"
)

// secret returns a password no process holds by chance.
func secret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "Pw" + hex.EncodeToString(b)
}

// Ensure a server that cannot reach its database, started as the runner
// starts it, prints no password, nor does the error the runner gets, not
// even where pgx reads part of the password as the host.
func TestPostgresConnectFailureShowsNoPassword(t *testing.T) {
	password := secret(t)
	t.Setenv(asServer, "1")
	for _, dsn := range []string{
		"postgres://idem:" + password + "@127.0.0.1:1/db?connect_timeout=2",                     // nothing listens on port 1
		"postgres://idem:pa@" + password + "@127.0.0.1:1/db?connect_timeout=2",                  // an unencoded '@': host "Pw…@127.0.0.1"
		"host=127.0.0.1 port=1 user=idem password=" + password + " dbname=db connect_timeout=2", // keyword/value
	} {
		args := []string{"-addr", protocol.DefaultAddr, "-store", string(protocol.Postgres), "-faults", "-dsn", dsn}
		_, err := serverproc.Start(context.Background(), os.Args[0], args, deadline)
		if err == nil || !strings.Contains(err.Error(), "exited with code 3") {
			t.Errorf("start on %q: %v, want an exit with code 3", dsn, err)
		} else if strings.Contains(err.Error(), password) {
			t.Errorf("start on %q: the error shows the password: %v", dsn, err)
		}
		_, err = serverproc.ReadState(context.Background(), os.Args[0], protocol.Postgres, store.Place{DSN: dsn})
		if err == nil {
			t.Errorf("read state of %q: no error", dsn)
		} else if strings.Contains(err.Error(), password) {
			t.Errorf("read state of %q: the error shows the password: %v", dsn, err)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"idemlab/internal/pgcluster"
	"idemlab/internal/pgcluster/pgclustertest"
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

// argsHolding returns the command lines of this machine's processes that
// hold s, NULs shown as spaces.
func argsHolding(t *testing.T, s string) []string {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range paths {
		b, err := os.ReadFile(p) // a process gone meanwhile: skipped
		if err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, p+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte(" "))))
		}
	}
	return found
}

// Ensure an effect server started as the runner starts it on a -pg-dsn
// server that asks for a password (the DSN pgcluster.Attach hands out, the
// flags of caserun's serverArgs, serverproc.Start), and its -read-state
// (serverproc.ReadState), have that password in no process's arguments,
// and still reach the database with it.
func TestPostgresPasswordInNoArguments(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	c := pgclustertest.ForTest(t)
	ctx := context.Background()
	password := secret(t)
	e, err := pgcluster.Attach(ctx, pgclustertest.PasswordRole(t, c, "idem", password), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop() })
	dsn, err := e.CreateDatabase(ctx, "secret_run")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.DropDatabase(ctx, "secret_run") })

	t.Setenv(asServer, "1") // serverproc's children inherit it: this binary is the server
	args := []string{"-addr", protocol.DefaultAddr, "-store", string(protocol.Postgres), "-capacity", "16",
		"-max-body", "1024", "-wait", "1s", "-faults", "-dsn", dsn}
	sp, err := serverproc.Start(ctx, os.Args[0], args, deadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Kill)
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(sp.PID) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cmdline, []byte("-dsn")) {
		t.Fatalf("/proc/%d/cmdline = %q: not the server started", sp.PID, cmdline)
	}
	if found := argsHolding(t, password); len(found) > 0 {
		t.Errorf("the password is in processes' arguments:\n%s", strings.Join(found, "\n"))
	}
	s := &server{t: t, addr: sp.Addr}
	if status, body, _ := s.post("k", ""); status != 200 || body != "1" {
		t.Fatalf("POST = %d %q, want 200 1 (the server reached the database); log:\n%s", status, body, strings.Join(sp.Log(), "\n"))
	}
	if code, err := sp.Stop(deadline); err != nil || code != 0 {
		t.Fatalf("stop = %d, %v, want 0", code, err)
	}
	st, err := serverproc.ReadState(ctx, os.Args[0], protocol.Postgres, store.Place{DSN: dsn})
	if err != nil || st.Counter != 1 {
		t.Fatalf("ReadState = counter %d, %v, want 1", st.Counter, err)
	}
	if log := strings.Join(sp.Log(), "\n"); strings.Contains(log, password) {
		t.Errorf("the server's log shows the password:\n%s", log)
	}
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

// Package pgclustertest gives tests a throwaway PostgreSQL, for one test
// or shared by a test binary, with a database per test. It is its own
// package so that nothing but tests links package testing.
package pgclustertest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"idemlab/internal/pgcluster"
)

// RequireEnv set to 1 (as CI does) makes a missing PostgreSQL a failure.
const RequireEnv = "IDEMLAB_REQUIRE_POSTGRES"

// ForTest starts a cluster for t alone, stopped when t ends; see SkipOrFail.
func ForTest(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{})
	if err != nil {
		SkipOrFail(t, err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop postgres: %v", err)
		}
	})
	return c
}

// SkipOrFail ends t for a cluster that could not start: a skip where
// PostgreSQL is not installed (unless RequireEnv), else a failure.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, pgcluster.ErrNotInstalled) && os.Getenv(RequireEnv) != "1" {
		t.Skipf("postgres tests skipped (%s; %s=1 makes this a failure): %v", pgcluster.Hint, RequireEnv, err)
	}
	t.Fatal(err)
}

// shared is the cluster Shared starts for a test binary.
var shared struct {
	sync.Mutex
	running bool // inside Main
	c       *pgcluster.Cluster
	err     error
}

// Main runs a test binary's tests, then stops the cluster Shared started:
//
//	func TestMain(m *testing.M) { os.Exit(pgclustertest.Main(m)) }
func Main(m *testing.M) int {
	shared.Lock()
	shared.running = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgclustertest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Shared returns the test binary's shared cluster, started on first use
// and stopped by Main.
func Shared(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.running {
		t.Fatal("pgclustertest.Shared needs TestMain to call pgclustertest.Main, which stops the cluster")
	}
	if shared.c == nil && shared.err == nil {
		shared.c, shared.err = pgcluster.Start(context.Background(), pgcluster.Options{})
	}
	if shared.err != nil {
		SkipOrFail(t, shared.err)
	}
	return shared.c
}

// Database is DatabaseOn the shared cluster.
func Database(t testing.TB) string {
	t.Helper()
	return DatabaseOn(t, Shared(t))
}

// dbSeq numbers the databases DatabaseOn creates.
var dbSeq atomic.Int64

// DatabaseOn creates a database for t on c, dropped when t ends, and
// returns its DSN.
func DatabaseOn(t testing.TB, c *pgcluster.Cluster) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", dbSeq.Add(1), dbName(t.Name()))
	dsn, err := c.CreateDatabase(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("%v", err)
		}
	})
	return dsn
}

// Connect opens a connection to dsn, closed when t ends.
func Connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// PasswordRole makes c ask every user but the superuser for a password
// (scram-sha-256), creates role user with password, allowed to log in
// and to create databases, and returns a URL of database postgres as
// user, password included: a server like one runner -pg-dsn names.
func PasswordRole(t testing.TB, c *pgcluster.Cluster, user, password string) string {
	t.Helper()
	ctx := context.Background()
	hba := "local all " + pgcluster.Superuser + " trust\nlocal all all scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(c.Dir, "data", "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := Connect(t, c.DSN("postgres"))
	literal := "'" + strings.ReplaceAll(password, "'", "''") + "'"
	if _, err := admin.Exec(ctx, `CREATE ROLE `+pgx.Identifier{user}.Sanitize()+` LOGIN CREATEDB PASSWORD `+literal); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	q := url.Values{}
	q.Set("host", c.Dir)
	q.Set("port", strconv.Itoa(pgcluster.Port))
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", User: url.User(user), Path: "/postgres", RawQuery: q.Encode()}
	// The reload takes effect when the postmaster gets to it: wait until
	// a connection without the password is refused.
	for deadline := time.Now().Add(30 * time.Second); ; {
		conn, err := pgx.Connect(ctx, u.String())
		if err != nil {
			break
		}
		conn.Close(ctx)
		if time.Now().After(deadline) {
			t.Fatalf("%s still connects without a password 30s after the reload", user)
		}
		time.Sleep(10 * time.Millisecond)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// dbName folds a test name into a short database name.
func dbName(s string) string {
	out := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(s))
	if len(out) > 48 {
		out = out[:48]
	}
	return out
}

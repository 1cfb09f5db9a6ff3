// Package pgclustertest gives tests a throwaway PostgreSQL: one cluster for
// a test alone (ForTest), or one shared by a test binary's tests (Shared,
// stopped by Main) with a database per test (Database), and a connection
// to look inside (Connect).
//
// It is a package of its own so that nothing but tests links package
// testing: the runner links pgcluster, and the effect server links neither.
package pgclustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"idemlab/internal/pgcluster"
)

// RequireEnv names the environment variable that makes a missing PostgreSQL
// a test failure instead of a skip. CI sets it to 1.
const RequireEnv = "IDEMLAB_REQUIRE_POSTGRES"

// Required reports whether RequireEnv makes a missing PostgreSQL a failure.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// ForTest starts a cluster for t alone and stops it when t ends. Where
// PostgreSQL is not installed it skips t with one logged reason, unless
// IDEMLAB_REQUIRE_POSTGRES=1, when it fails t; any other failure to start
// fails t.
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

// Installed skips t (or fails it, with IDEMLAB_REQUIRE_POSTGRES=1) where
// PostgreSQL's programs are missing.
func Installed(t testing.TB) {
	t.Helper()
	if _, err := pgcluster.FindBinDir(); err != nil {
		SkipOrFail(t, err)
	}
}

// SkipOrFail ends t for a cluster that could not start: a skip with one
// logged reason where PostgreSQL is not installed (unless RequireEnv says
// otherwise), a failure for anything else.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, pgcluster.ErrNotInstalled) && !Required() {
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

// Main runs a test binary's tests and then stops the cluster Shared
// started, if any. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgclustertest.Main(m)) }
//
// A test binary that dies (a panic, SIGKILL) leaves no server either: its
// parent-death signal stops it, and the next Start removes its folder.
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

// Shared returns the cluster shared by the tests of this test binary,
// starting it on first use; Main stops it after the last test, so the
// binary's TestMain must call Main. Give each test its own database
// (Database). It skips or fails t as ForTest does.
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

// Database creates a database for t on the shared cluster, named after t,
// and drops it when t ends; it returns the database's DSN.
func Database(t testing.TB) string {
	t.Helper()
	return DatabaseOn(t, Shared(t))
}

// dbSeq numbers the databases DatabaseOn creates.
var dbSeq atomic.Int64

// DatabaseOn creates a database for t on c, named after t, and drops it
// when t ends; it returns the database's DSN.
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

// Connect opens a connection to dsn for t, closed when t ends (or before,
// by the caller).
func Connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// dbName folds a test name into a database name: lowercase letters, digits
// and underscores, short enough for PostgreSQL's 63-byte names.
func dbName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 48 {
		out = out[:48]
	}
	return out
}

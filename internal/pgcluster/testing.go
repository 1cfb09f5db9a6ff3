package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// RequireEnv names the environment variable that makes a missing PostgreSQL
// a test failure instead of a skip. CI sets it to 1.
const RequireEnv = "IDEMLAB_REQUIRE_POSTGRES"

// ForTest starts a cluster for t alone and stops it when t ends. Where
// PostgreSQL is not installed it skips t with one logged reason, unless
// IDEMLAB_REQUIRE_POSTGRES=1, when it fails t; any other failure to start
// fails t.
func ForTest(t testing.TB) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), Options{})
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop postgres: %v", err)
		}
	})
	return c
}

// skipOrFail ends t for a cluster that could not start.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNotInstalled) && os.Getenv(RequireEnv) != "1" {
		t.Skipf("postgres tests skipped (%s; %s=1 makes this a failure): %v", Hint, RequireEnv, err)
	}
	t.Fatal(err)
}

// shared is the cluster Shared starts for a test binary.
var shared struct {
	sync.Mutex
	running bool // inside RunTests
	c       *Cluster
	err     error
}

// RunTests runs a test binary's tests and then stops the cluster Shared
// started, if any. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgcluster.RunTests(m)) }
//
// A test binary that dies (a panic, SIGKILL) leaves no server either: its
// parent-death signal stops it, and the next Start removes its folder.
func RunTests(m *testing.M) int {
	shared.Lock()
	shared.running = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgcluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Shared returns the cluster shared by the tests of this test binary,
// starting it on first use; RunTests stops it after the last test, so the
// binary's TestMain must call RunTests. Give each test its own database
// (DatabaseForTest). It skips or fails t as ForTest does.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.running {
		t.Fatal("pgcluster.Shared needs TestMain to call pgcluster.RunTests, which stops the cluster")
	}
	if shared.c == nil && shared.err == nil {
		shared.c, shared.err = Start(context.Background(), Options{})
	}
	if shared.err != nil {
		skipOrFail(t, shared.err)
	}
	return shared.c
}

// dbSeq numbers the databases DatabaseForTest creates.
var dbSeq atomic.Int64

// DatabaseForTest creates a database for t, named after it, and drops it
// when t ends; it returns the database's DSN.
func (c *Cluster) DatabaseForTest(t testing.TB) string {
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

package pgclustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"idemlab/internal/pgcluster"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// Ensure the shared cluster and per-test databases work together.
func TestDatabase(t *testing.T) {
	dsn := Database(t)
	var n int
	if err := Connect(t, dsn).QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("tables in a fresh database = %d, want 0", n)
	}
}

func TestDBName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"TestApply/new_key", "testapply_new_key"},
		{strings.Repeat("x", 80), strings.Repeat("x", 48)},
	} {
		if got := dbName(tc.in); got != tc.want {
			t.Errorf("dbName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// decisionTB records how SkipOrFail ended a test.
type decisionTB struct {
	testing.TB
	ended string
}

func (d *decisionTB) Helper()              {}
func (d *decisionTB) Skipf(string, ...any) { d.ended = "skip"; panic(d) }
func (d *decisionTB) Fatal(...any)         { d.ended = "fail"; panic(d) }

// decide runs SkipOrFail, whose Skipf and Fatal end it with a panic.
func (d *decisionTB) decide(err error) {
	defer func() { recover() }()
	SkipOrFail(d, err)
}

// Ensure a missing PostgreSQL skips a test, unless IDEMLAB_REQUIRE_POSTGRES=1
// makes it a failure; any other failure to start fails it.
func TestSkipOrFail(t *testing.T) {
	notInstalled := fmt.Errorf("start postgres: %w", pgcluster.ErrNotInstalled)
	broke := errors.New("start postgres: initdb: exit status 1")
	for _, tc := range []struct {
		require string
		err     error
		want    string
	}{
		{"", notInstalled, "skip"},
		{"1", notInstalled, "fail"},
		{"", broke, "fail"},
		{"1", broke, "fail"},
	} {
		t.Setenv(RequireEnv, tc.require)
		d := &decisionTB{TB: t}
		d.decide(tc.err)
		if d.ended != tc.want {
			t.Errorf("%s=%q, %v: test ended with %q, want %q", RequireEnv, tc.require, tc.err, d.ended, tc.want)
		}
	}
}

// Ensure parallel runs can create their databases at the same time.
func TestCreateDatabasesConcurrently(t *testing.T) {
	c := Shared(t)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			name := fmt.Sprintf("concurrent_%d", i)
			if _, errs[i] = c.CreateDatabase(context.Background(), name); errs[i] == nil {
				errs[i] = c.DropDatabase(context.Background(), name)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

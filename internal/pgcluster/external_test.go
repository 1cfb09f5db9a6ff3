package pgcluster_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/pgcluster"
	"idemlab/internal/pgcluster/pgclustertest"

	"github.com/jackc/pgx/v5"
)

// Ensure pgcluster.Attach works against a server it did not start: it makes a
// database, hands out a DSN that connects to it, drops it, and leaves the
// server running; an unreachable server's error hides the password.
func TestAttach(t *testing.T) {
	c := pgclustertest.ForTest(t)
	ctx := context.Background()
	e, err := pgcluster.Attach(ctx, c.DSN("postgres"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if e.Version == "" {
		t.Error("pgcluster.Attach: no server version")
	}
	dsn, err := e.CreateDatabase(ctx, "attached_run")
	if err != nil {
		t.Fatal(err)
	}
	name := e.Database("attached_run")
	conn := pgclustertest.Connect(t, dsn)
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil || db != name {
		t.Fatalf("current_database() = %q, %v, want %s", db, err, name)
	}
	conn.Close(ctx)
	if err := e.DropDatabase(ctx, "attached_run"); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateDatabase(ctx, "still_up"); err != nil {
		t.Fatalf("the server stopped with the attachment: %v", err)
	}

	_, err = pgcluster.Attach(ctx, "postgres://lab:s3cret@127.0.0.1:1/x?connect_timeout=2", t.TempDir())
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "xxxxx") {
		t.Fatalf("pgcluster.Attach(unreachable) error = %v, want one naming the DSN without its password", err)
	}
}

// Ensure the DSNs an External attached with a password hands out hold no
// password (they go into processes' arguments, which ps shows, and into
// targets' logs) and still connect to a server that asks for it: the
// password is in a 0600 file in the folder Attach was given, gone after
// Stop. The password holds every byte a password file escapes.
func TestAttachPasswordOnlyInItsFile(t *testing.T) {
	c := pgclustertest.ForTest(t)
	ctx := context.Background()
	const password = `Pw:with\back@sl/ash?#&='"`
	dsn := pgclustertest.PasswordRole(t, c, "idem", password)
	if err := pgcluster.CheckDSN(dsn); err != nil {
		t.Fatalf("CheckDSN(a password with : and \\) = %v", err)
	}
	dir := t.TempDir()
	e, err := pgcluster.Attach(ctx, dsn, dir)
	if err != nil {
		t.Fatal(err)
	}
	runDSN, err := e.CreateDatabase(ctx, "pw_run")
	if err != nil {
		t.Fatal(err)
	}
	for _, shown := range []string{password, url.QueryEscape(password), url.PathEscape(password), url.UserPassword("idem", password).String(), "Pw"} {
		if strings.Contains(runDSN, shown) {
			t.Errorf("CreateDatabase's DSN %q holds the password (as %q)", runDSN, shown)
		}
	}
	conn := pgclustertest.Connect(t, runDSN)
	var user, db string
	if err := conn.QueryRow(ctx, `SELECT current_user, current_database()`).Scan(&user, &db); err != nil || user != "idem" || db != e.Database("pw_run") {
		t.Fatalf("connected as %q to %q (%v), want idem to %s", user, db, err, e.Database("pw_run"))
	}
	conn.Close(ctx)
	passfile := filepath.Join(dir, pgcluster.PassfileName)
	fi, err := os.Stat(passfile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", passfile, fi.Mode().Perm())
	}
	if err := e.DropDatabase(ctx, "pw_run"); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(passfile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Stop, the password file: %v, want it gone", err)
	}
}

// Ensure a password a password file cannot hold is refused before
// anything starts, without being shown.
func TestCheckDSNRefusesPasswordsNoFileHolds(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:line%0Abreak@host/db",
		"postgres://u:trailing%20@host/db",
		"host=h user=u password='trailing ' dbname=db",
	} {
		err := pgcluster.CheckDSN(dsn)
		if err == nil || !strings.Contains(err.Error(), "password file cannot hold") {
			t.Errorf("CheckDSN(%q) = %v, want the password file refusing it", dsn, err)
			continue
		}
		for _, secret := range []string{"line", "break", "trailing"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("CheckDSN(%q) = %v: shows the password", dsn, err)
			}
		}
	}
}

// The test binary doubles as a runner attached to a server (-pg-dsn),
// chosen by this variable (its value is the DSN): it makes a database,
// prints its name and waits to be killed.
const attachEnv = "PGCLUSTER_TEST_ATTACH"

func attachMain(dsn string) int {
	ctx := context.Background()
	e, err := pgcluster.Attach(ctx, dsn, "") // no password: no file
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := e.CreateDatabase(ctx, "run_child"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("DB %s\n", e.Database("run_child"))
	time.Sleep(time.Minute)
	return 0
}

// databases lists the server's databases named like a runner's, but for
// the cluster's template.
func databases(t *testing.T, c *pgcluster.Cluster) []string {
	t.Helper()
	ctx := context.Background()
	conn := pgclustertest.Connect(t, c.DSN("postgres"))
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE (datname LIKE 'idemlab\_%' OR datname LIKE 'run\_%') AND datname <> $1 ORDER BY datname`, pgcluster.TemplateDB)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// awaitLeaseFree waits until the server has ended the session that held
// the lease of the runner that made database db (after a SIGKILL the
// server notices the closed connection at once, but on its own time).
func awaitLeaseFree(t *testing.T, c *pgcluster.Cluster, db string) {
	t.Helper()
	ctx := context.Background()
	conn := pgclustertest.Connect(t, c.DSN("postgres"))
	owner, err := strconv.ParseUint(strings.Split(db, "_")[1], 16, 32)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var held int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid AND objid = $2::oid AND granted`,
			uint32(pgcluster.LeaseClass), uint32(owner)).Scan(&held)
		if err != nil {
			t.Fatal(err)
		}
		if held == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s is still held 30s after its runner was killed", db)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ensure the databases of a runner killed with SIGKILL on a -pg-dsn server
// are dropped by the next runner that attaches, and only then: a live
// runner's database stays while another attaches, and so does any
// database not named by a runner's lease (an older run_<hex>, another
// application's).
func TestAttachSweepsDeadRunners(t *testing.T) {
	c := pgclustertest.ForTest(t)
	ctx := context.Background()
	for _, other := range []string{"run_0123456789abcdef", "idemlab_notmine"} {
		if _, err := c.CreateDatabase(ctx, other); err != nil {
			t.Fatal(err)
		}
	}
	cmd, db := startChild(t, attachEnv+"="+c.DSN("postgres"), "DB") // an attached runner and its database
	live, err := pgcluster.Attach(ctx, c.DSN("postgres"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(live.Swept) > 0 {
		t.Errorf("Attach beside a live runner swept %v, want nothing", live.Swept)
	}
	if err := live.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := databases(t, c); !slices.Contains(got, db) {
		t.Fatalf("databases = %v: the live runner's %s is gone", got, db)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	awaitLeaseFree(t, c, db)
	if got := databases(t, c); !slices.Contains(got, db) {
		t.Fatalf("databases = %v: the killed runner's %s went before anyone swept", got, db)
	}
	next, err := pgcluster.Attach(ctx, c.DSN("postgres"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Stop()
	if got, want := next.Swept, []string{db}; !slices.Equal(got, want) {
		t.Errorf("Attach after the kill swept %v, want %v", got, want)
	}
	if got, want := databases(t, c), []string{"idemlab_notmine", "run_0123456789abcdef"}; !slices.Equal(got, want) {
		t.Errorf("databases after the sweep = %v, want %v", got, want)
	}
}

package pgcluster_test

import (
	"context"
	"strings"
	"testing"

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
	e, err := pgcluster.Attach(ctx, c.DSN("postgres"))
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
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", dsn, err)
	}
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil || db != "attached_run" {
		t.Fatalf("current_database() = %q, %v, want attached_run", db, err)
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

	_, err = pgcluster.Attach(ctx, "postgres://lab:s3cret@127.0.0.1:1/x?connect_timeout=2")
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "xxxxx") {
		t.Fatalf("pgcluster.Attach(unreachable) error = %v, want one naming the DSN without its password", err)
	}
}

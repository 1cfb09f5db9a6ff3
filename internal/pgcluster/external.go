package pgcluster

import (
	"context"
	"fmt"
	"net/url"

	"idemlab/internal/store/postgres/redact"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// An External is a PostgreSQL server the lab did not start (runner
// -pg-dsn): it makes and drops each run's database on it, and leaves the
// server running.
type External struct {
	admin   *pgxpool.Pool
	config  *pgconn.Config
	Version string // SHOW server_version
}

// Attach connects to the server at dsn, whose user must be allowed to
// create databases. Errors name the DSN with its password hidden.
func Attach(ctx context.Context, dsn string) (*External, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", redact.DSN(dsn), err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", redact.DSN(dsn), err)
	}
	e := &External{admin: pool, config: cfg.ConnConfig.Config.Copy()}
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&e.Version); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: %w", redact.DSN(dsn), err)
	}
	return e, nil
}

// CreateDatabase creates database name and returns the DSN of it: the
// attached server's connection with the database replaced.
func (e *External) CreateDatabase(ctx context.Context, name string) (string, error) {
	if _, err := e.admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return e.dsn(name), nil
}

// DropDatabase drops database name, ending its open connections first.
func (e *External) DropDatabase(ctx context.Context, name string) error {
	if _, err := e.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// Stop closes the connection to the server, which keeps running.
func (e *External) Stop() error {
	e.admin.Close()
	return nil
}

// dsn is a URL for database db on the attached server, as the same user.
func (e *External) dsn(db string) string {
	c := e.config
	q := url.Values{}
	q.Set("host", c.Host)
	q.Set("port", fmt.Sprint(c.Port))
	if c.TLSConfig == nil {
		q.Set("sslmode", "disable")
	}
	u := url.URL{Scheme: "postgres", Path: "/" + db, RawQuery: q.Encode()}
	if c.Password != "" {
		u.User = url.UserPassword(c.User, c.Password)
	} else {
		u.User = url.User(c.User)
	}
	return u.String()
}

// ServerVersion returns the server's version (SHOW server_version), for
// manifests.
func (e *External) ServerVersion() string { return e.Version }

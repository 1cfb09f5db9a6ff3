package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"idemlab/internal/store/postgres/redact"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// An External is a PostgreSQL server the lab did not start (runner
// -pg-dsn): it makes and drops each run's database there.
//
// A runner killed with SIGKILL cannot drop its databases, so an External
// holds a lease while attached: a session advisory lock (LeaseClass,
// owner) on its own connection, which the server releases when the
// runner's connection closes however it dies. Its databases are named
// idemlab_<owner in hex>_<name>, and Attach drops another owner's only
// when it gets that owner's lock: provably no runner uses them.
type External struct {
	admin       *pgxpool.Pool
	lease       *pgx.Conn // holds the advisory lock (LeaseClass, owner)
	owner       uint32
	config      *pgconn.Config
	passfile    string   // holds the password of the DSNs handed out; "" without one
	Version     string   // SHOW server_version
	Swept       []string // databases of gone runners that Attach dropped
	SweepFailed []error  // drops that failed: reported, tried again next time
}

// LeaseClass is the first key of every runner's advisory lock, the lab's
// own, so its locks do not meet an application's single-key ones.
const LeaseClass int32 = 0x1de31ab

// maxDatabaseName is the longest database name PostgreSQL keeps whole; it
// truncates a longer one silently.
const maxDatabaseName = 63

// leasedName is the shape of a database an attached runner made.
var leasedName = regexp.MustCompile(`^idemlab_([0-9a-f]{8})_(.+)$`)

// CheckDSN refuses a dsn pgx cannot parse, or whose password a password
// file cannot hold (see Attach), its password hidden.
func CheckDSN(dsn string) error {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err == nil {
		_, err = passfileLine(cfg.ConnConfig.Password)
	}
	if err != nil {
		return fmt.Errorf("postgres %s: %w", redact.DSN(dsn), redact.Error(dsn, err))
	}
	return nil
}

// PassfileName is the password file Attach writes in its folder.
const PassfileName = "pgpass"

// Attach connects to the server at dsn (whose user may create databases),
// drops the databases of gone runners and takes its own lease. Errors hide
// the password, pgx's own text included.
//
// The DSNs CreateDatabase hands out hold no password, since they end up
// in processes' arguments (ps shows them to every user), in targets' logs
// and in evidence: when the server needs one, Attach writes it into
// dir/PassfileName (mode 0600; dir should be private to the runner and
// removed with it, as its temp folder is), which the DSNs name as their
// passfile (read by pgx and libpq alike); Stop removes it.
func Attach(ctx context.Context, dsn, dir string) (*External, error) {
	fail := func(err error) error {
		return fmt.Errorf("postgres %s: %w", redact.DSN(dsn), redact.Failure(dsn, err))
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", redact.DSN(dsn), redact.Error(dsn, err))
	}
	passfile, err := writePassfile(dir, cfg.ConnConfig.Password)
	if err != nil {
		return nil, fail(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		removePassfile(passfile)
		return nil, fail(err)
	}
	e := &External{admin: pool, config: cfg.ConnConfig.Config.Copy(), passfile: passfile}
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&e.Version); err != nil {
		e.Stop()
		return nil, fail(err)
	}
	if e.lease, err = pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy()); err != nil {
		e.Stop()
		return nil, fail(fmt.Errorf("lease connection: %w", err))
	}
	// No idle timeout may end the lease's session (PostgreSQL 14 on).
	_, _ = e.lease.Exec(ctx, `SET idle_session_timeout = 0`)
	if err := e.sweepAndLease(ctx); err != nil {
		e.Stop()
		return nil, fail(err)
	}
	return e, nil
}

// sweepAndLease drops the databases of owners whose lease is free, then
// takes a lease of a fresh owner number.
func (e *External) sweepAndLease(ctx context.Context) error {
	rows, err := e.admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'idemlab\_%' ORDER BY datname`)
	if err != nil {
		return fmt.Errorf("list databases: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list databases: %w", err)
	}
	byOwner := map[uint32][]string{}
	for _, n := range names {
		if m := leasedName.FindStringSubmatch(n); m != nil {
			o, _ := strconv.ParseUint(m[1], 16, 32)
			byOwner[uint32(o)] = append(byOwner[uint32(o)], n)
		}
	}
	for _, o := range slices.Sorted(maps.Keys(byOwner)) {
		free, err := e.tryLock(ctx, o)
		if err != nil {
			return err
		}
		if !free {
			continue // its runner is attached: leave them
		}
		for _, n := range byOwner[o] {
			if _, err := e.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{n}.Sanitize()+` WITH (FORCE)`); err != nil {
				e.SweepFailed = append(e.SweepFailed, fmt.Errorf("drop database %s of a runner that is gone: %w", n, err))
				continue
			}
			e.Swept = append(e.Swept, n)
		}
		if _, err := e.lease.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, LeaseClass, int32(o)); err != nil {
			return fmt.Errorf("release the lease of %08x: %w", o, err)
		}
	}
	for range 100 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("pick an owner number: %w", err)
		}
		o := binary.BigEndian.Uint32(b[:])
		if _, named := byOwner[o]; named {
			continue // a gone runner's whose databases could not all go
		}
		free, err := e.tryLock(ctx, o)
		if err != nil {
			return err
		}
		if free {
			e.owner = o
			return nil
		}
	}
	return errors.New("no free owner number after 100 tries")
}

// tryLock takes the lease of owner o on the lease connection, if free.
func (e *External) tryLock(ctx context.Context, o uint32) (bool, error) {
	var got bool
	if err := e.lease.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, LeaseClass, int32(o)).Scan(&got); err != nil {
		return false, fmt.Errorf("try the lease of %08x: %w", o, err)
	}
	return got, nil
}

// Database is this runner's database name as named on the server.
func (e *External) Database(name string) string {
	return fmt.Sprintf("idemlab_%08x_%s", e.owner, name)
}

// CreateDatabase creates this runner's database name and returns its DSN.
func (e *External) CreateDatabase(ctx context.Context, name string) (string, error) {
	db := e.Database(name)
	if len(db) > maxDatabaseName {
		return "", fmt.Errorf("create database %s: longer than the %d bytes PostgreSQL keeps", db, maxDatabaseName)
	}
	if _, err := e.admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{db}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", db, err)
	}
	return e.dsn(db), nil
}

// DropDatabase drops this runner's database name, ending its connections.
func (e *External) DropDatabase(ctx context.Context, name string) error {
	db := e.Database(name)
	if _, err := e.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{db}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", db, err)
	}
	return nil
}

// Stop closes the connections, the lease's with them, and removes the
// password file; the server runs on.
func (e *External) Stop() error {
	e.admin.Close()
	removePassfile(e.passfile)
	if e.lease != nil {
		return e.lease.Close(context.Background())
	}
	return nil
}

// dsn is a URL for database db on the attached server, as the same user,
// with no password: the password file holds it.
func (e *External) dsn(db string) string {
	c := e.config
	q := url.Values{}
	q.Set("host", c.Host)
	q.Set("port", fmt.Sprint(c.Port))
	if c.TLSConfig == nil {
		q.Set("sslmode", "disable")
	}
	if e.passfile != "" {
		q.Set("passfile", e.passfile)
	}
	u := url.URL{Scheme: "postgres", User: url.User(c.User), Path: "/" + db, RawQuery: q.Encode()}
	return u.String()
}

// maxPassword bounds a password in a password file, whose reader
// (pgpassfile's bufio.Scanner) takes lines of at most 64 KiB.
const maxPassword = 60000

// passfileLine is the password file line giving password for every host,
// port, database and user, ':' and '\' escaped, or why a password file
// cannot hold it: a reader trims a line's white space and splits lines
// at CR and LF (and pgpassfile uses both as markers of its own).
func passfileLine(password string) (string, error) {
	switch {
	case strings.ContainsAny(password, "\r\n\x00"):
		return "", errors.New("the password holds a line break or a NUL byte, which the servers' password file cannot hold")
	case strings.TrimRightFunc(password, unicode.IsSpace) != password:
		return "", errors.New("the password ends in white space, which the servers' password file cannot hold")
	case len(password) > maxPassword:
		return "", fmt.Errorf("the password is longer than the %d bytes the servers' password file holds", maxPassword)
	}
	escaped := strings.NewReplacer(`\`, `\\`, ":", `\:`).Replace(password)
	return "*:*:*:*:" + escaped + "\n", nil
}

// writePassfile writes password into dir/PassfileName, readable by this
// user alone, and returns its path; "" for no password.
func writePassfile(dir, password string) (string, error) {
	if password == "" {
		return "", nil
	}
	line, err := passfileLine(password)
	if err != nil {
		return "", err
	}
	if dir == "" {
		return "", errors.New("no folder for the password file")
	}
	abs, err := filepath.Abs(filepath.Join(dir, PassfileName))
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	f, err := os.OpenFile(abs, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(abs)
		return "", fmt.Errorf("password file %s: %w", abs, err)
	}
	return abs, nil
}

// removePassfile removes the password file at path, if any.
func removePassfile(path string) {
	if path != "" {
		os.Remove(path)
	}
}

// ServerVersion returns Version.
func (e *External) ServerVersion() string { return e.Version }

// Package postgres is the postgres store: the counter, the keys and the
// journal of effects in one PostgreSQL database (pgx v5) shared by
// replicas, where an effect and its key's result commit in one
// transaction. The database, not any one process, decides which replica
// applies a key. Open creates the tables in an empty database and refuses
// one holding other tables or another layout version.
//
// # Who applies a key: the key's primary key
//
// A keyed intent first claims its key (READ COMMITTED): INSERT … ON
// CONFLICT (key) DO NOTHING, a row without a value. A committed row is
// read: the same fingerprint replays, another is store.ErrConflict. A row
// of a transaction still open (the owner, on another replica) makes the
// insert wait, at most wait (lock_timeout; then store.ErrInProgress): if
// the owner commits the waiter replays, if it aborts or its process dies
// the waiter becomes the owner. One index probe, no retry loop, waiters
// blocked on the exact row they need; FOR UPDATE needs the row to exist
// first, and SERIALIZABLE would need a retry loop and could not make a
// duplicate wait for the owner's result.
//
// The owner then runs the effect (the state row's counter, and its count
// of keys if under capacity, else store.ErrFull) with its journal row,
// afterEffect, the key's value, COMMIT. The state row serializes effects,
// so the journal holds exactly 1..counter; a crash before the commit rolls
// back all of it, the claim included, and a waiting duplicate takes over.
//
// # Group commit
//
// Apply hands its intent to the committer (package groupcommit), which
// runs every intent waiting, up to groupcommit.MaxBatch, in one
// transaction of four round trips (batch.go): every claim in one INSERT …
// ORDER BY key plus one SELECT of the rows not inserted; the state row
// locked and, for several owners, a savepoint, then one statement for
// every effect (the keyed owners beyond the free places are store.ErrFull,
// before any callback); each afterEffect in order; every key's value and
// one COMMIT. Each intent is answered after that commit.
//
// # One intent's failure is its own
//
// Each intent gets the answer it would have got alone. An owner whose
// afterEffect fails is answered its error and the batch retried without
// it in the same transaction: ROLLBACK TO the savepoint, its claim
// deleted, the other effects applied again (values contiguous), no
// callback called twice. One savepoint per batch, not per intent: a
// backend caches only 64 subtransactions (PGPROC_MAX_CACHED_SUBXIDS), and
// one per intent costs a round trip each with the batch's locks held. A
// key another transaction holds (claims wait tryTimeout), one past its
// TTL, or one whose row vanished sends its intent to run alone on the
// caller's goroutine, so a batch never waits for a key. A claims statement
// failing otherwise is rerun a key at a time, each in a savepoint. A
// second intent of a key waits for the next batch.
//
// A lost connection or a lock wait beyond busyTimeout fails every
// unanswered intent of the transaction with store.ErrUnavailable. The
// batch is not rerun on a new connection: its callbacks have run, and
// after a lost COMMIT an unkeyed intent would apply twice.
//
// # No deadlocks
//
// Every transaction takes its locks in one order: key rows in byte order
// (COLLATE "C"; an expired key's row is deleted before the state row),
// then the state row, then nothing it could wait for (the purge of expired
// keys skips locked rows). So no cycle of waits can form
// (TestReplicasHotKeysNoDeadlock). A deadlock or serialization failure
// PostgreSQL reports anyway (a foreign session) is retried, maxAttempts in
// all, then store.ErrUnavailable (503, never 500); callbacks that returned
// nil are not called again.
//
// # Callbacks and stalls
//
// afterEffect runs with the state row held: a stalled callback holds
// every effect on every replica (busyTimeout, then ErrUnavailable) and its
// own batch and queue. Running callbacks concurrently would let nothing
// past the state row sooner, so the committer calls them in turn. A
// callback's panic is recovered, its intent rolled back, and Apply panics
// with it in the caller's goroutine. Throughput is in docs/benchmarks.md.
package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"idemlab/internal/store"
	"idemlab/internal/store/internal/groupcommit"
	"idemlab/internal/store/postgres/redact"
)

// LayoutVersion is the table layout's version, kept in the layout table.
const LayoutVersion = 2

// tables are the layout's tables, sorted.
var tables = []string{"claims", "effects", "keys", "layout", "state"}

// schema creates the tables of LayoutVersion in an empty database.
const schema = `
CREATE TABLE layout (version integer NOT NULL);
INSERT INTO layout (version) VALUES (2);
CREATE TABLE state (
	id      integer PRIMARY KEY CHECK (id = 1),
	counter bigint NOT NULL,
	keys    bigint NOT NULL
);
INSERT INTO state (id, counter, keys) VALUES (1, 0, 0);
CREATE TABLE keys (
	key         text PRIMARY KEY,
	fingerprint bytea NOT NULL,
	value       bigint,
	recorded_at bigint
);
CREATE TABLE claims (
	key         text PRIMARY KEY,
	fingerprint bytea NOT NULL,
	token       text NOT NULL,
	lease_until bigint NOT NULL,
	value       bigint,
	recorded_at bigint
);
CREATE TABLE effects (
	value       bigint PRIMARY KEY,
	body_sha256 text NOT NULL
);
`

// layoutLock serializes Opens creating the tables.
const layoutLock = 0x1de71ab

// busyTimeout bounds every lock wait but the claim's; running out is
// ErrUnavailable.
const busyTimeout = 10 * time.Second

// defaultMaxConns is the pool's size unless the DSN sets pool_max_conns:
// a duplicate waiting for another replica holds a connection.
const defaultMaxConns = 16

// tryTimeout bounds (ms) a batch's wait for a held key before its intent
// runs alone.
const tryTimeout = 1

// The statements of an intent run alone.
const (
	claimKey = `INSERT INTO keys (key, fingerprint) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`
	readKey  = `SELECT fingerprint, value, recorded_at FROM keys WHERE key = $1`
)

// lockNotAvailable is the SQLSTATE of a lock wait run out.
const lockNotAvailable = "55P03"

// A Store is an open database, safe for concurrent use.
type Store struct {
	dsn      string // redacted, for messages
	capacity int64
	pool     *pgxpool.Pool

	claimTimeout string // SET LOCAL lock_timeout for the claim of an intent alone
	tryTimeout   string // and for a batch's claims
	busyTimeout  string // and back for the rest of the transaction

	committer *groupcommit.Committer[*pending, outcome]

	commits, intents, retries, deadlocks atomic.Int64 // see Stats

	store.KeyClock // the key TTL and the clock (phased.go)
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Phased   = (*Store)(nil) // phased.go
	_ store.Expiring = (*Store)(nil) // phased.go
)

// Open connects to the database at dsn for capacity keys; a duplicate
// waits at most wait for another replica's owner. Errors name the DSN
// with its password redacted, and so quote pgx's connection errors.
func Open(ctx context.Context, dsn string, capacity int, wait time.Duration) (*Store, error) {
	name := redact.DSN(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		if pce, ok := errors.AsType[*pgconn.ParseConfigError](err); ok {
			// pce's text quotes the DSN (its password masked only at best).
			if err = errors.Unwrap(pce); err == nil {
				err = errors.New("cannot parse the DSN")
			}
		}
		return nil, fmt.Errorf("postgres store %s: %w", name, err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(busyTimeout.Milliseconds(), 10)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres store %s: %w", name, redact.Failure(dsn, err))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: connect: %w", name, redact.Failure(dsn, err))
	}
	if err := initialize(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: %w", name, err)
	}
	s := &Store{
		dsn:          name,
		capacity:     int64(capacity),
		pool:         pool,
		claimTimeout: fmt.Sprintf("SET LOCAL lock_timeout = %d", max(wait.Milliseconds(), 1)),
		tryTimeout:   fmt.Sprintf("SET LOCAL lock_timeout = %d", tryTimeout),
		busyTimeout:  fmt.Sprintf("SET LOCAL lock_timeout = %d", busyTimeout.Milliseconds()),
	}
	s.committer = groupcommit.Start(groupcommit.MaxBatch, s.commitBatch)
	return s, nil
}

// initialize checks the database's layout, creating the tables in an empty
// one under an advisory lock.
func initialize(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, layoutLock); err != nil {
		return err
	}
	empty, err := checkLayout(ctx, tx)
	if err != nil || !empty {
		return err
	}
	if _, err := tx.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	return nil
}

// checkLayout checks that the database holds LayoutVersion's tables, or none.
func checkLayout(ctx context.Context, tx pgx.Tx) (empty bool, err error) {
	rows, err := tx.Query(ctx, `SELECT table_schema, table_name FROM information_schema.tables
		WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2`)
	if err != nil {
		return false, fmt.Errorf("list tables: %w", err)
	}
	var found []string
	var ours []string
	for rows.Next() {
		var schema, table string
		if err := rows.Scan(&schema, &table); err != nil {
			return false, fmt.Errorf("list tables: %w", err)
		}
		found = append(found, schema+"."+table)
		if schema == "public" {
			ours = append(ours, table)
		}
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("list tables: %w", err)
	}
	if len(found) == 0 {
		return true, nil
	}
	if len(found) != len(ours) || !slices.Equal(ours, tables) {
		return false, fmt.Errorf("not an idemlab store database: it holds %s (want exactly public.%s)", strings.Join(found, ", "), strings.Join(tables, ", public."))
	}
	var version int
	if err := tx.QueryRow(ctx, `SELECT version FROM layout`).Scan(&version); err != nil {
		return false, fmt.Errorf("read layout version: %w", err)
	}
	if version != LayoutVersion {
		return false, fmt.Errorf("layout version %d, want %d", version, LayoutVersion)
	}
	return false, nil
}

// Recorded returns every recorded key, in the order their effects applied.
func (s *Store) Recorded() ([]store.Record, error) {
	recs, err := s.readKeys(false)
	return store.Records(recs), err
}

// RecordedWithTimes returns Apply's live keys with their times.
func (s *Store) RecordedWithTimes() ([]store.TimedRecord, error) { return s.readKeys(true) }

// readKeys reads Apply's keys in the order applied; if live, less the
// expired ones.
func (s *Store) readKeys(live bool) ([]store.TimedRecord, error) {
	rows, err := s.pool.Query(context.Background(), `SELECT key, fingerprint, value, recorded_at FROM keys ORDER BY value`)
	if err != nil {
		return nil, s.fail("read keys", err)
	}
	defer rows.Close()
	var recs []store.TimedRecord
	for rows.Next() {
		var r store.TimedRecord
		var fp []byte
		var value, at *int64
		if err := rows.Scan(&r.Key, &fp, &value, &at); err != nil {
			return nil, s.fail("read keys", err)
		}
		if len(fp) != len(r.Fingerprint) {
			return nil, fmt.Errorf("postgres store %s: key %q: fingerprint of %d bytes, want %d", s.dsn, r.Key, len(fp), len(r.Fingerprint))
		}
		if value == nil {
			return nil, fmt.Errorf("postgres store %s: key %q committed without a value", s.dsn, r.Key)
		}
		if live && (at == nil || s.expired(at)) {
			continue
		}
		copy(r.Fingerprint[:], fp)
		r.Value = *value
		if at != nil {
			r.RecordedAt = time.UnixMilli(*at)
		}
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("read keys", err)
	}
	return recs, nil
}

// Apply runs one intent and returns once its transaction is committed or
// rolled back (see the package comment). Beyond store.Store's answers: a
// key held by another replica past wait is store.ErrInProgress, a lost
// connection store.ErrUnavailable; afterEffect's error comes back
// unwrapped.
func (s *Store) Apply(in store.Intent, afterEffect func() error) (store.Result, error) {
	p := &pending{in: in, afterEffect: afterEffect}
	o, err := s.committer.Do(p)
	if err != nil { // groupcommit.ErrClosed: nothing ran
		return store.Result{}, s.fail("apply", errClosed)
	}
	if o.alone {
		o = s.applyAlone(p)
	}
	if o.panicked != nil {
		panic(o.panicked)
	}
	return o.res, o.err
}

// Close stops the committer, after the transaction in progress, and
// closes the store's connections.
func (s *Store) Close() error {
	s.committer.Close()
	s.pool.Close()
	return nil
}

// failConn is fail, with a connection the error closed making it
// store.ErrUnavailable.
func (s *Store) failConn(conn *pgxpool.Conn, what string, err error) error {
	if conn.Conn().IsClosed() {
		return fmt.Errorf("postgres store %s: %s: %w: %w", s.dsn, what, store.ErrUnavailable, err)
	}
	return s.fail(what, err)
}

// fail wraps an error of the store, unavailable ones with store.ErrUnavailable.
func (s *Store) fail(what string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("postgres store %s: %s: %w: %w", s.dsn, what, store.ErrUnavailable, err)
	}
	return fmt.Errorf("postgres store %s: %s: %w", s.dsn, what, err)
}

// unavailable reports whether err says the database could not be reached
// or ended the session (class 08, 57P01-3 operator intervention, 53300 too
// many connections), or a lock wait ran out.
func unavailable(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"),
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03",
			pgErr.Code == "53300", pgErr.Code == lockNotAvailable:
			return true
		}
		return false
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	return pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)
}

// ReadState returns the counter and effects of the database at dsn, once
// every server on it has exited (no tables: zero), checking that the
// effects are exactly values 1 to counter.
func ReadState(ctx context.Context, dsn string) (store.State, error) {
	name := redact.DSN(dsn)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return store.State{}, fmt.Errorf("postgres store %s: connect: %w", name, redact.Failure(dsn, err))
	}
	defer conn.Close(ctx)
	st, err := readState(ctx, conn)
	if err != nil {
		return store.State{}, fmt.Errorf("postgres store %s: %w", name, err)
	}
	return st, nil
}

func readState(ctx context.Context, conn *pgx.Conn) (store.State, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return store.State{}, err
	}
	defer tx.Rollback(ctx)
	empty, err := checkLayout(ctx, tx)
	if err != nil || empty {
		return store.State{}, err
	}
	var st store.State
	if err := tx.QueryRow(ctx, `SELECT counter FROM state WHERE id = 1`).Scan(&st.Counter); err != nil {
		return store.State{}, fmt.Errorf("read counter: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT value, body_sha256 FROM effects ORDER BY value`)
	if err != nil {
		return store.State{}, fmt.Errorf("read effects: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e store.Effect
		if err := rows.Scan(&e.Value, &e.BodySHA256); err != nil {
			return store.State{}, fmt.Errorf("read effects: %w", err)
		}
		if want := int64(len(st.Effects)) + 1; e.Value != want {
			return store.State{}, fmt.Errorf("effects: value %d where %d was expected", e.Value, want)
		}
		if _, err := hex.DecodeString(e.BodySHA256); err != nil || len(e.BodySHA256) != 64 {
			return store.State{}, fmt.Errorf("effects: value %d: body_sha256 %q is not 64 hex digits", e.Value, e.BodySHA256)
		}
		st.Effects = append(st.Effects, e)
	}
	if err := rows.Err(); err != nil {
		return store.State{}, fmt.Errorf("read effects: %w", err)
	}
	if int64(len(st.Effects)) != st.Counter {
		return store.State{}, fmt.Errorf("%d effects recorded, but the counter holds %d", len(st.Effects), st.Counter)
	}
	return st, nil
}

// Package postgres is the postgres store: the counter, the idempotency keys
// and the journal of applied effects in one PostgreSQL database (pgx v5),
// where an effect and its key's result commit in one transaction. Several
// server processes (replicas), each with its own *Store on the same
// database, share it; the database, not any one process, decides which of
// them applies a key.
//
//	layout  (version integer)          one row: LayoutVersion
//	state   (id integer PRIMARY KEY CHECK (id = 1), counter bigint, keys bigint)
//	        one row: the counter (the side effect) and how many keys are held
//	keys    (key text PRIMARY KEY, fingerprint bytea, value bigint, recorded_at bigint)
//	        one row per recorded key: the SHA-256 of its request body,
//	        the counter value its effect produced, and when (Unix ms),
//	        from which the key TTL runs; value is NULL only inside the
//	        owner's open transaction
//	claims  the downstream mode's claims and results (see phased.go)
//	effects (value bigint PRIMARY KEY, body_sha256 text)
//	        one row per applied effect, keyed or not: the counter value it
//	        produced and the SHA-256 (hex) of its request body
//
// Open creates the tables in an empty database and refuses one holding
// other tables or another layout version (version 1 had no recorded_at and
// no claims).
//
// # Who applies a key: the key's primary key
//
// Every transaction of Apply is READ COMMITTED. A keyed intent first claims
// its key: INSERT … ON CONFLICT (key) DO NOTHING, a row with the
// fingerprint and no value yet. The primary key's unique index decides
// among racing replicas:
//
//   - no row: the insert succeeds and this transaction owns the key;
//   - a committed row: the insert does nothing, and a second statement
//     reads the row: the same fingerprint replays its value (Replayed, no
//     effect, afterEffect not called), another is store.ErrConflict;
//   - a row inserted by a transaction still open (the owner, on another
//     replica, applying the effect): the insert waits for that transaction
//     to end. If it commits, the waiter replays its result as above; if it
//     aborts (afterEffect failed, or its process died and PostgreSQL rolled
//     it back), the waiter's insert goes through and the waiter becomes the
//     owner and applies. The wait is bounded by SET LOCAL lock_timeout =
//     wait; a wait that runs out (SQLSTATE 55P03) is store.ErrInProgress
//     and leaves the owner alone.
//
// This is the design's own words ("the key is claimed before the effect")
// in the database's primitive for them: one index probe, no retry loop, and
// waiters block on the exact row they need rather than on a table or on
// every writer. A row lock (SELECT … FOR UPDATE) needs the row to exist
// before anyone can lock it, so it would need the insert anyway; SERIALIZABLE
// would abort the loser with a serialization failure and need a retry loop
// to turn that into a replay, and could not make a duplicate wait for the
// owner's result.
//
// The owner then runs, in order: the effect (the state row's counter + 1,
// and keys + 1 for a keyed intent if fewer than capacity keys are held,
// else store.ErrFull) with its effects row; afterEffect; the key row's
// value; COMMIT. The state row serializes effects, so the journal holds
// exactly the values 1..counter. A crash anywhere before the commit (a
// crash fault in afterEffect ends the process with the transaction open)
// makes PostgreSQL roll back all of it, the claim included, so a waiting
// duplicate takes over.
//
// # Group commit
//
// Apply hands its intent to the store's committer (one goroutine per
// Store, package groupcommit, shared with the durable store), which takes
// every intent waiting at that moment, up to groupcommit.MaxBatch, and
// runs them in one transaction in four round trips, however many they
// are (batch.go):
//
//  1. the claims: every key in one INSERT … SELECT … ORDER BY key ON
//     CONFLICT DO NOTHING RETURNING key, then the rows of the keys not
//     inserted, read in one SELECT (a replay or store.ErrConflict each);
//  2. the effects: for several owners the state row locked (SELECT … FOR
//     UPDATE) and a savepoint, then one statement adding the owners' count to the counter and
//     writing one journal row per owner, values in the batch's order; it
//     applies only if the keyed owners all fit, else expired keys are
//     purged and the keyed owners beyond the free places are
//     store.ErrFull, before any callback;
//  3. each owner's afterEffect, in order, on the committer;
//  4. every key's value in one UPDATE, and one COMMIT: one WAL flush for
//     the batch. Each intent is answered only after that commit returns
//     (or the transaction rolled back).
//
// Intents waiting at the same moment thus share one commit, as in the
// durable store; Stats counts the commits and the effects they held.
//
// # One intent's failure is its own
//
// Each intent gets the answer it would have got alone:
//
//   - a replay or a conflict writes nothing;
//   - a keyed intent refused for want of a place (store.ErrFull) has its
//     claim deleted in the transaction (its own uncommitted row); if a
//     callback then fails, that place is free again, and the refused
//     intents are run alone instead;
//   - an owner whose afterEffect fails (a crash fault's hook in a test, a
//     stalled request the server cuts at shutdown) is answered its error,
//     and the batch is retried without it, inside the same transaction:
//     ROLLBACK TO the savepoint before the effects, its claim deleted, the
//     other owners' effects applied again in one statement (their values
//     contiguous, as if the failed one had run alone before them and rolled
//     back), no callback called twice, COMMIT. Nothing of it is left, and
//     its key is free for a retry. The state row is locked before the
//     savepoint, so the rollback keeps it and the count of keys cannot
//     change in between. A lone owner needs no savepoint: its failure
//     rolls back the transaction;
//   - a key another transaction holds (another replica's owner), a key
//     recorded but past its TTL, or a key whose row vanished since the
//     claim sends its intent alone: the claims wait at most tryTimeout (1
//     ms) for a held key, and Apply then runs that intent in a transaction
//     of its own on the caller's goroutine, as every intent ran before
//     group commit: the claim waiting up to wait, expiry, effect, callback,
//     record, commit. So a duplicate waiting for an owner on another
//     replica never holds up a batch, and a batch never waits for a key;
//   - a batch's claims statement that fails for another reason (a key the
//     database refuses) is run again one key at a time, each in a
//     savepoint, so that the failure is its key's alone;
//   - a key appears once in a batch: a second intent of it waits for the
//     next batch, where it finds the first one's outcome committed.
//
// Savepoints, then, but one per batch, not one per intent as in the
// durable store: a savepoint that writes is a subtransaction, and a
// PostgreSQL backend caches only 64 of them (PGPROC_MAX_CACHED_SUBXIDS)
// before every snapshot on the server must look them up in pg_subtrans;
// and a savepoint per intent needs a statement per intent, a round trip
// each, with the batch's locks held meanwhile. A retry of the whole batch
// in a new transaction would call every callback again. With one savepoint
// the rare failure costs one more round trip.
//
// A connection lost during Apply (the server gone, the backend terminated,
// as when the process crashes) or a lock wait beyond busyTimeout fails the
// transaction as a whole: each intent of it not yet answered gets an error
// wrapping store.ErrUnavailable. The connection is the batch's, as the
// process is: a lost one takes every uncommitted intent of its batch with
// it. The transaction rolled back, or, when the COMMIT's answer was lost,
// its outcome is unknown; either way a retry with the same key applies it
// or replays it, never twice. The batch is not rerun on a new connection:
// its callbacks have run, and after a lost COMMIT an unkeyed intent would
// apply twice.
//
// # No deadlocks
//
// Every transaction of Apply takes its locks in one order: the key rows
// first, in byte order (the claims' ORDER BY key COLLATE "C"; an intent
// alone claims one key, and an expired key's row is deleted before the
// state row, whose count drops with the effect), then the state row, and
// then nothing it could wait for: its own claims, journal rows whose
// values only the state row's holder can write, and the purge of expired
// keys, which skips rows another transaction holds (FOR UPDATE SKIP
// LOCKED). A transaction thus only waits for a lock later in that order
// than every lock it holds, so no cycle of waits can form
// (TestReplicasHotKeysNoDeadlock runs two replicas on overlapping fresh
// keys). Should PostgreSQL still
// abort a transaction as a deadlock (SQLSTATE 40P01, as with a foreign
// session) or a serialization failure (40001), it is run again, at most
// maxAttempts times in all, then answered store.ErrUnavailable (503), never
// a 500; the callbacks that returned nil are not called again. Stats
// counts the retries and the deadlocks.
//
// # Callbacks and stalls
//
// afterEffect runs inside its transaction with the state row held, as it
// did when each intent was a transaction: a stalled callback holds every
// effect on every replica (each waits for the state row, at most
// busyTimeout, then store.ErrUnavailable), and on its own replica its
// batch and the intents queued behind it, which wait without a bound of
// their own until the callback returns. Running callbacks concurrently, or
// several batches at once, would let nothing past the state row sooner, so
// the committer calls them one after another: the simple design. A
// callback that panics is recovered, its intent rolled back, and Apply
// panics with the same value in the caller's goroutine.
//
// The gain, measured by BenchmarkPostgres on a shared 2-CPU machine
// (medians of 6 runs, alternating with the store of one transaction per
// intent it replaced): one goroutine about 870 req/s (before: about 830),
// 64 goroutines about 8,500 req/s at 33 intents per commit, about
// PostgreSQL's own ceiling with 64 connections (before: about 440, 0.04 of
// it), and two replicas of 32 about 6,400 req/s at 16 per commit each
// (before: about 380): the replicas' batches take turns on the state row.
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

// layoutLock is the advisory lock key that serializes Opens creating the
// tables (two replicas starting at once on an empty database).
const layoutLock = 0x1de71ab

// busyTimeout bounds every lock wait but the claim's (the state row held by
// another replica's transaction); a wait that runs out is ErrUnavailable.
const busyTimeout = 10 * time.Second

// defaultMaxConns is the pool's size unless the DSN sets pool_max_conns:
// a duplicate waiting for another replica holds a connection.
const defaultMaxConns = 16

// tryTimeout bounds, in milliseconds, how long a batch's claims wait for a
// key that another transaction holds before that key's intent is run alone
// (see the package comment).
const tryTimeout = 1

// The statements of an intent run alone (pgx prepares and caches each
// statement per connection).
const (
	claimKey = `INSERT INTO keys (key, fingerprint) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`
	readKey  = `SELECT fingerprint, value, recorded_at FROM keys WHERE key = $1`
)

// SQLSTATE codes the store tells apart.
const (
	lockNotAvailable = "55P03"
)

// A Store is an open database. Its methods are safe for concurrent use.
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

// Open connects to the database at dsn (a URL or keyword/value string that
// pgx accepts) for a store holding at most capacity keys, where a duplicate
// waits at most wait for another replica's owner of its key. It creates
// the tables in an empty database. A database that cannot be reached, or
// holds other tables or another layout, is an error naming the DSN with its
// password redacted.
func Open(ctx context.Context, dsn string, capacity int, wait time.Duration) (*Store, error) {
	name := redact.DSN(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		var pce *pgconn.ParseConfigError
		if errors.As(err, &pce) && errors.Unwrap(pce) != nil {
			err = errors.Unwrap(pce)
		} else if errors.As(err, &pce) {
			err = errors.New("cannot parse the DSN")
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
		return nil, fmt.Errorf("postgres store %s: %w", name, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: connect: %w", name, err)
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
// one. Replicas opening at once serialize on an advisory lock, and the
// later ones find the first one's tables.
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

// checkLayout checks that the database holds the tables of LayoutVersion,
// or no tables at all (empty).
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

// RecordedWithTimes returns the live keys of Apply, as Recorded, with the
// time each was recorded, for a registry that expires them (RestoreAt).
func (s *Store) RecordedWithTimes() ([]store.TimedRecord, error) { return s.readKeys(true) }

// readKeys reads the keys of Apply, in the order their effects applied;
// if live, only those the key TTL has not expired.
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

// Apply runs one intent and returns once the transaction holding it is
// committed (durable) or rolled back:
//
//   - the key is recorded with the same fingerprint: its value, Replayed;
//   - the key is recorded with another fingerprint: store.ErrConflict;
//   - another replica's transaction holds the key for longer than wait:
//     store.ErrInProgress;
//   - the key is new and capacity keys are recorded: store.ErrFull;
//   - otherwise the effect and its journal row, then afterEffect (inside
//     the transaction, before the key's value and the commit), then the
//     key's value; the new counter value.
//
// Intents waiting at the same moment share one transaction (see the
// package comment); each gets the answer it would have got alone. If
// afterEffect fails, the intent's effect and claim roll back and Apply
// returns its error unwrapped; the other intents of its transaction are
// not affected. A lost connection is an error wrapping
// store.ErrUnavailable, for every intent of the transaction.
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

// failConn wraps an error of a statement on conn: a connection that the
// error closed (the server gone, the backend terminated) makes it
// store.ErrUnavailable.
func (s *Store) failConn(conn *pgxpool.Conn, what string, err error) error {
	if conn.Conn().IsClosed() {
		return fmt.Errorf("postgres store %s: %s: %w: %w", s.dsn, what, store.ErrUnavailable, err)
	}
	return s.fail(what, err)
}

// fail wraps an error of the store: one saying that the server could not
// be reached or dropped the session wraps store.ErrUnavailable.
func (s *Store) fail(what string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("postgres store %s: %s: %w: %w", s.dsn, what, store.ErrUnavailable, err)
	}
	return fmt.Errorf("postgres store %s: %s: %w", s.dsn, what, err)
}

// unavailable reports whether err says the database could not be reached
// or ended the session: a connection error, a connection exception
// (SQLSTATE class 08), an operator intervention (57P01 terminated, 57P02
// crash shutdown, 57P03 cannot connect now), too many connections, or a
// lock wait beyond busyTimeout.
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

// ReadState returns the counter and the applied effects (in the order
// applied) of the database at dsn, for use after every server on it has
// exited. A database without the tables means 0 and no effects. It checks
// that the effects are exactly the counter's: values 1 to counter.
func ReadState(ctx context.Context, dsn string) (store.State, error) {
	name := redact.DSN(dsn)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return store.State{}, fmt.Errorf("postgres store %s: connect: %w", name, err)
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

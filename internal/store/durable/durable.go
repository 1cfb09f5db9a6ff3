// Package durable is the durable store: the counter, the keys and the
// journal of effects in one SQLite database, DIR/state.db (WAL,
// synchronous=FULL), where an effect and its key's result commit in one
// transaction. Several processes may share the folder: SQLite's write lock
// orders them and the key's primary key decides which one applies it.
//
// A new database is made whole under a temporary name, then linked to
// state.db, so Open can refuse any state.db it cannot trust instead of
// starting from zero. Apply's intents are group-committed: a batch in one
// BEGIN IMMEDIATE transaction, each of several under its own SAVEPOINT.
//
// Limitation: afterEffect runs inside the write transaction and SQLite has
// one writer, so the stall=NNms fault holds every other write, in this
// process (the committer) and in others sharing the folder (up to
// busyTimeoutMS, then 500). It must: case replicas_owner_crash_waiter has
// a duplicate wait for that transaction and see the crash roll it back;
// stalling before it would let the duplicate apply first.
package durable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"idemlab/internal/store"
	"idemlab/internal/store/internal/folderlock"
	"idemlab/internal/store/internal/groupcommit"
)

// FileName is the database's name inside the state folder.
const FileName = "state.db"

// SchemaVersion is the table layout's version, kept in PRAGMA user_version.
const SchemaVersion = 2

// busyTimeoutMS bounds a wait for another process's write lock.
const busyTimeoutMS = 10000

// schema creates the tables of SchemaVersion in an empty database. keys
// are Apply's recorded keys, claims the downstream mode's (phased.go),
// effects the journal; times are Unix ms.
const schema = `
CREATE TABLE state (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	counter INTEGER NOT NULL,
	keys    INTEGER NOT NULL
);
INSERT INTO state (id, counter, keys) VALUES (1, 0, 0);
CREATE TABLE keys (
	key         TEXT PRIMARY KEY,
	fingerprint BLOB NOT NULL,
	value       INTEGER NOT NULL,
	recorded_at INTEGER NOT NULL
);
CREATE TABLE claims (
	key         TEXT PRIMARY KEY,
	fingerprint BLOB NOT NULL,
	token       TEXT NOT NULL,
	lease_until INTEGER NOT NULL,
	value       INTEGER,
	recorded_at INTEGER
);
CREATE TABLE effects (
	value       INTEGER PRIMARY KEY,
	body_sha256 TEXT NOT NULL
);
PRAGMA user_version = 2;
`

// The statements an intent runs, prepared once.
var statements = [...]string{
	lookup:    `SELECT s.keys, k.fingerprint, k.value, k.recorded_at FROM state AS s LEFT JOIN keys AS k ON k.key = ? WHERE s.id = 1`,
	increment: `UPDATE state SET counter = counter + 1, keys = keys + ? WHERE id = 1 RETURNING counter`,
	journal:   `INSERT INTO effects (value, body_sha256) VALUES (?, ?)`,
	record:    `INSERT INTO keys (key, fingerprint, value, recorded_at) VALUES (?, ?, ?, ?)`,
	purge:     `DELETE FROM keys WHERE recorded_at <= ?`,
	recount:   `UPDATE state SET keys = (SELECT count(*) FROM keys) WHERE id = 1 RETURNING keys`,
	savepoint: `SAVEPOINT intent`,
	rollback:  `ROLLBACK TO intent`,
	release:   `RELEASE intent`,
}

// Indexes into statements.
const (
	lookup = iota
	increment
	journal
	record
	purge
	recount
	savepoint
	rollback
	release
)

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("durable store closed")

// A Store is an open database, safe for concurrent use.
type Store struct {
	path     string
	capacity int64
	lock     *os.File // the state folder, share-locked
	db       *sql.DB
	stmts    [len(statements)]*sql.Stmt

	committer *groupcommit.Committer[pending, outcome]

	commits, intents atomic.Int64 // see Stats

	store.KeyClock // the key TTL and the clock (phased.go)
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Phased   = (*Store)(nil) // phased.go
	_ store.Expiring = (*Store)(nil) // phased.go
)

// Stats counts commits and the intents they held: their ratio is the mean
// group-commit batch.
type Stats struct {
	Commits int64
	Intents int64
}

func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Intents: s.intents.Load()}
}

// pending is an intent waiting for the committer.
type pending struct {
	in          store.Intent
	afterEffect func() error
}

// outcome is an intent's answer.
type outcome struct {
	res store.Result
	err error
}

type queued = groupcommit.Call[pending, outcome]

// dsn opens the database at path with BEGIN IMMEDIATE transactions (the
// write lock up front). No journal mode: WAL is the file's, set by create.
func dsn(path string) string {
	return fmt.Sprintf("%s?_busy_timeout=%d&_synchronous=FULL&_txlock=immediate", path, busyTimeoutMS)
}

// tempPrefix starts the name of a database create is making.
const tempPrefix = ".state.db-new-"

// Open opens (or creates) the database in dir for capacity keys and holds
// a shared lock on the folder until Close. It never starts from zero
// beside state it cannot use: a database not whole, not of this layout,
// corrupt, with a counter disagreeing with its journal or more keys than
// capacity, or the volatile store's files, is an error naming the file.
func Open(dir string, capacity int) (*Store, error) {
	s, lock, err := folderlock.Hold(dir, folderlock.Shared, "a volatile server holds it", func() (*Store, error) {
		return openLocked(dir, capacity)
	})
	if err != nil {
		return nil, err
	}
	s.lock = lock
	s.committer = groupcommit.Start(0, s.runBatch)
	return s, nil
}

// openLocked is Open once the folder is locked.
func openLocked(dir string, capacity int) (*Store, error) {
	if err := refuseForeign(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		return nil, fmt.Errorf("durable store %s: empty (0 bytes): not a database this store made (it makes state.db whole before naming it)", path)
	}
	if err := create(dir, path); err != nil {
		return nil, fmt.Errorf("durable store %s: create: %w", path, err)
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("durable store %s: %w", path, err)
	}
	// One connection: the committer's. Reads at start wait for it.
	db.SetMaxOpenConns(1)
	if err := check(db, int64(capacity)); err != nil {
		db.Close()
		return nil, fmt.Errorf("durable store %s: %w", path, err)
	}
	s := &Store{
		path:     path,
		capacity: int64(capacity),
		db:       db,
	}
	for i, q := range statements {
		if s.stmts[i], err = db.Prepare(q); err != nil {
			db.Close()
			return nil, fmt.Errorf("durable store %s: prepare %q: %w", path, q, err)
		}
	}
	return s, nil
}

// create makes the database at path if there is none: tables and WAL mode
// under a temporary name, then a link to path, which loses to another
// process's link. Setting it up in place raced: SQLite's switch to WAL
// gives one of two starting processes SQLITE_BUSY without waiting, about
// one start in forty.
func create(dir, path string) error {
	if _, err := os.Lstat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
			os.Remove(tmp + suffix)
		}
	}()
	db, err := sql.Open("sqlite", dsn(tmp)+"&_journal_mode=WAL")
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return fmt.Errorf("create tables: %w", err)
	}
	// The last connection's close checkpoints and removes the WAL.
	if err := db.Close(); err != nil {
		return err
	}
	if _, err := os.Lstat(tmp + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s-wal: still there after close (%v)", tmp, err)
	}
	if err := store.Sync(tmp); err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return store.Sync(dir)
}

// check checks the database's integrity, layout and WAL mode, that its
// counts agree with its rows, and that its keys fit in capacity.
func check(db *sql.DB, capacity int64) error {
	var result string
	if err := db.QueryRow(`PRAGMA quick_check`).Scan(&result); err != nil {
		return err
	}
	if result != "ok" {
		return fmt.Errorf("corrupt: %s", result)
	}
	empty, err := layout(db)
	if err != nil {
		return err
	}
	if empty {
		return errors.New("not an idemlab state database (no tables, no schema version)")
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		return err
	}
	if mode != "wal" {
		return fmt.Errorf("journal mode %q, want wal", mode)
	}
	// One statement, one snapshot: other servers may be writing.
	var counter, keys, effects, lo, hi, recorded int64
	err = db.QueryRow(`SELECT counter, keys,
		(SELECT count(*) FROM effects), (SELECT coalesce(min(value), 0) FROM effects), (SELECT coalesce(max(value), 0) FROM effects),
		(SELECT count(*) FROM keys)
		FROM state WHERE id = 1`).Scan(&counter, &keys, &effects, &lo, &hi, &recorded)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return errors.New("no state row: table state is empty")
	case err != nil:
		return fmt.Errorf("read state: %w", err)
	case effects != counter:
		return fmt.Errorf("counter holds %d, but %d effects are journaled", counter, effects)
	case counter > 0 && (lo != 1 || hi != counter):
		return fmt.Errorf("counter holds %d, but the journaled effects have values %d to %d", counter, lo, hi)
	case keys != recorded:
		return fmt.Errorf("%d keys counted, but %d recorded", keys, recorded)
	case recorded > capacity:
		return fmt.Errorf("%d keys recorded, more than the capacity of %d (-capacity must be at least %d)", recorded, capacity, recorded)
	}
	return nil
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	QueryRow(query string, args ...any) *sql.Row
}

// layout checks that the database has SchemaVersion's tables, or none.
func layout(q querier) (empty bool, err error) {
	var version, tables int
	if err := q.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		return false, err
	}
	if err := q.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table'`).Scan(&tables); err != nil {
		return false, err
	}
	switch {
	case version == SchemaVersion:
		return false, nil
	case version == 0 && tables == 0:
		return true, nil
	case version == 0:
		return false, fmt.Errorf("not an idemlab state database (%d tables, no schema version)", tables)
	default:
		return false, fmt.Errorf("schema version %d, want %d", version, SchemaVersion)
	}
}

// Recorded returns every recorded key and its result, in the order recorded.
func (s *Store) Recorded() ([]store.Record, error) {
	keys, err := s.readKeys(false)
	return store.Records(keys), err
}

// RecordedWithTimes returns Apply's live keys with their times.
func (s *Store) RecordedWithTimes() ([]store.TimedRecord, error) { return s.readKeys(true) }

// readKeys reads Apply's keys in the order recorded; if live, less the
// expired ones.
func (s *Store) readKeys(live bool) ([]store.TimedRecord, error) {
	rows, err := s.db.Query(`SELECT key, fingerprint, value, recorded_at FROM keys ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("durable store %s: read keys: %w", s.path, err)
	}
	defer rows.Close()
	cut, expiring := s.ExpiredBefore(s.Now())
	var keys []store.TimedRecord
	for rows.Next() {
		var k store.TimedRecord
		var fp []byte
		var at int64
		if err := rows.Scan(&k.Key, &fp, &k.Value, &at); err != nil {
			return nil, fmt.Errorf("durable store %s: read keys: %w", s.path, err)
		}
		if len(fp) != len(k.Fingerprint) {
			return nil, fmt.Errorf("durable store %s: key %q: fingerprint of %d bytes, want %d", s.path, k.Key, len(fp), len(k.Fingerprint))
		}
		if live && expiring && at <= cut {
			continue
		}
		copy(k.Fingerprint[:], fp)
		k.RecordedAt = time.UnixMilli(at)
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("durable store %s: read keys: %w", s.path, err)
	}
	return keys, nil
}

// Apply runs one intent in a group-committed write transaction and returns
// once it is committed or rolled back. A failing intent (afterEffect's
// error unwrapped) rolls back alone; a failed commit fails every intent
// sharing it.
func (s *Store) Apply(in store.Intent, afterEffect func() error) (store.Result, error) {
	o, err := s.committer.Do(pending{in: in, afterEffect: afterEffect})
	if err != nil { // groupcommit.ErrClosed: nothing ran
		return store.Result{}, ErrClosed
	}
	return o.res, o.err
}

// Close stops the committer, after the transaction in progress, and closes
// the database.
func (s *Store) Close() error {
	s.committer.Close()
	for _, st := range s.stmts {
		st.Close()
	}
	err := s.db.Close()
	s.lock.Close() // after the database: a volatile server may take the folder
	if err != nil {
		return fmt.Errorf("durable store %s: close: %w", s.path, err)
	}
	return nil
}

// runBatch is the committer's run: one transaction, nothing carried.
func (s *Store) runBatch(batch []*queued) (carry []*queued) {
	out := make([]outcome, len(batch))
	err := s.transact(batch, out)
	for i, c := range batch {
		if err != nil {
			out[i] = outcome{err: err}
		}
		c.Answer(out[i])
	}
	return nil
}

// transact runs the batch's intents into out and commits; an error means
// nothing was committed. A lone intent needs no savepoint: its failure
// rolls back the transaction.
func (s *Store) transact(batch []*queued, out []outcome) (err error) {
	tx, err := s.db.BeginTx(context.Background(), nil) // BEGIN IMMEDIATE (see dsn)
	if err != nil {
		return fmt.Errorf("durable store %s: begin: %w", s.path, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var st [len(statements)]*sql.Stmt
	for i, stmt := range s.stmts {
		st[i] = tx.Stmt(stmt)
	}
	alone := len(batch) == 1
	for i, c := range batch {
		res, err := s.applyOne(&st, &c.Arg, !alone)
		if broken, ok := errors.AsType[*txError](err); ok {
			return broken.err
		}
		out[i] = outcome{res: res, err: err}
	}
	if alone && out[0].err != nil {
		if err := tx.Rollback(); err != nil {
			return fmt.Errorf("durable store %s: roll back: %w", s.path, err)
		}
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("durable store %s: commit: %w", s.path, err)
	}
	s.commits.Add(1)
	s.intents.Add(int64(len(batch)))
	return nil
}

// A txError means the transaction itself can no longer be used.
type txError struct{ err error }

func (e *txError) Error() string { return e.err.Error() }

// applyOne runs one intent with the transaction's statements st. A
// *txError means the transaction must be abandoned.
func (s *Store) applyOne(st *[len(statements)]*sql.Stmt, p *pending, savepoints bool) (store.Result, error) {
	in := p.in
	keyed := in.Key != ""
	if keyed {
		var keys int64
		var fp []byte
		var value, recordedAt sql.NullInt64
		if err := st[lookup].QueryRow(in.Key).Scan(&keys, &fp, &value, &recordedAt); err != nil {
			return store.Result{}, fmt.Errorf("durable store %s: look up key %q: %w", s.path, in.Key, err)
		}
		if cut, ok := s.ExpiredBefore(s.Now()); ok && (value.Valid && recordedAt.Int64 <= cut || !value.Valid && keys >= s.capacity) {
			var err error
			if keys, err = s.purgeKeys(st, cut); err != nil {
				return store.Result{}, err
			}
			value.Valid = value.Valid && recordedAt.Int64 > cut // an expired key is absent
		}
		switch {
		case value.Valid && string(fp) == string(in.Fingerprint[:]):
			return store.Result{Value: value.Int64, Replayed: true}, nil
		case value.Valid:
			return store.Result{}, store.ErrConflict
		case keys >= s.capacity:
			return store.Result{}, store.ErrFull
		}
	}
	if !savepoints {
		value, err := s.effect(st, p)
		return store.Result{Value: value}, err
	}
	if _, err := st[savepoint].Exec(); err != nil {
		return store.Result{}, &txError{fmt.Errorf("durable store %s: savepoint: %w", s.path, err)}
	}
	value, err := s.effect(st, p)
	if err != nil {
		if _, rerr := st[rollback].Exec(); rerr != nil {
			return store.Result{}, &txError{fmt.Errorf("durable store %s: roll back intent after %v: %w", s.path, err, rerr)}
		}
	}
	if _, rerr := st[release].Exec(); rerr != nil {
		return store.Result{}, &txError{fmt.Errorf("durable store %s: release savepoint: %w", s.path, rerr)}
	}
	return store.Result{Value: value}, err
}

// effect runs the intent's writes: the effect, the hook, the key's row.
func (s *Store) effect(st *[len(statements)]*sql.Stmt, p *pending) (int64, error) {
	keyed := int64(0)
	if p.in.Key != "" {
		keyed = 1
	}
	var value int64
	if err := st[increment].QueryRow(keyed).Scan(&value); err != nil {
		return 0, fmt.Errorf("durable store %s: apply effect: %w", s.path, err)
	}
	if _, err := st[journal].Exec(value, p.in.Fingerprint.Hex()); err != nil {
		return 0, fmt.Errorf("durable store %s: journal effect %d: %w", s.path, value, err)
	}
	if err := p.afterEffect(); err != nil {
		return 0, err
	}
	if keyed == 0 {
		return value, nil
	}
	if _, err := st[record].Exec(p.in.Key, p.in.Fingerprint[:], value, s.Now().UnixMilli()); err != nil {
		return 0, fmt.Errorf("durable store %s: record key %q: %w", s.path, p.in.Key, err)
	}
	return value, nil
}

// ReadState returns the counter and effects of the database in dir, once
// every server on it has exited (none: zero), checking that the effects
// are exactly values 1 to counter.
func ReadState(dir string) (store.State, error) {
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return store.State{}, nil
	} else if err != nil {
		return store.State{}, fmt.Errorf("durable store %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", path+fmt.Sprintf("?_busy_timeout=%d&_query_only=1", busyTimeoutMS))
	if err != nil {
		return store.State{}, fmt.Errorf("durable store %s: %w", path, err)
	}
	defer db.Close()
	st, err := readState(db)
	if err != nil {
		return store.State{}, fmt.Errorf("durable store %s: %w", path, err)
	}
	return st, nil
}

func readState(db *sql.DB) (store.State, error) {
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return store.State{}, err
	}
	defer tx.Rollback()
	empty, err := layout(tx)
	if err != nil {
		return store.State{}, err
	}
	if empty { // 0 bytes too: this store never names a database without its tables
		return store.State{}, errors.New("not an idemlab state database (no tables, no schema version)")
	}
	var counter int64
	if err := tx.QueryRow(`SELECT counter FROM state WHERE id = 1`).Scan(&counter); err != nil {
		return store.State{}, fmt.Errorf("read counter: %w", err)
	}
	rows, err := tx.Query(`SELECT value, body_sha256 FROM effects ORDER BY value`)
	if err != nil {
		return store.State{}, fmt.Errorf("read effects: %w", err)
	}
	defer rows.Close()
	var effects []store.Effect
	for rows.Next() {
		var e store.Effect
		if err := rows.Scan(&e.Value, &e.BodySHA256); err != nil {
			return store.State{}, fmt.Errorf("read effects: %w", err)
		}
		if want := int64(len(effects)) + 1; e.Value != want {
			return store.State{}, fmt.Errorf("effects: value %d where %d was expected", e.Value, want)
		}
		effects = append(effects, e)
	}
	if err := rows.Err(); err != nil {
		return store.State{}, fmt.Errorf("read effects: %w", err)
	}
	if int64(len(effects)) != counter {
		return store.State{}, fmt.Errorf("%d effects recorded, but the counter holds %d", len(effects), counter)
	}
	return store.State{Counter: counter, Effects: effects}, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"idemlab/internal/store"
	"idemlab/internal/store/internal/groupcommit"
)

// Apply's group commit: the transaction of a batch, or of an intent alone
// (see the package comment).

// maxAttempts bounds the runs of a transaction PostgreSQL aborted as a
// deadlock or serialization failure; then store.ErrUnavailable.
const maxAttempts = 5

// maxClaims bounds the claims of an intent alone whose key's row another
// transaction removed (expired) between its claim and its read.
const maxClaims = 4

// The statements of a batch, one round trip each, and their one-row forms
// for a batch of one (about 90 µs less per intent: otherwise a lone client
// would be slower than with a transaction per intent).
const (
	// Keys claimed in byte order (as slices.Sort), which every transaction
	// shares.
	claimKeys = `INSERT INTO keys (key, fingerprint)
SELECT k, f FROM unnest($1::text[], $2::bytea[]) AS c(k, f) ORDER BY k COLLATE "C"
ON CONFLICT (key) DO NOTHING RETURNING key`
	readKeys = `SELECT key, fingerprint, value, recorded_at FROM keys WHERE key = ANY($1::text[])`
	// lockState takes the state row outside the effects' savepoint, so
	// rolling back to it keeps the lock and the count of keys unchanged.
	lockState = `SELECT keys FROM state WHERE id = 1 FOR UPDATE`
	// The effects of $1 intents, $2 of them keyed, in a store of capacity
	// $3 where $4 expired keys were deleted by this transaction (still
	// counted): the counter + $1, one effects row per body hash of $5, in
	// order; no row means the keyed intents do not all fit.
	applyEffects = `WITH s AS (
	UPDATE state SET counter = counter + $1::bigint, keys = keys + $2::bigint - $4::bigint
	WHERE id = 1 AND ($2::bigint = 0 OR keys - $4::bigint + $2::bigint <= $3::bigint)
	RETURNING counter
), e AS (
	INSERT INTO effects (value, body_sha256)
	SELECT s.counter - $1::bigint + u.i, u.sha FROM s, unnest($5::text[]) WITH ORDINALITY AS u(sha, i)
)
SELECT counter FROM s`
	// applyEffects for one intent: $1 = 1 if keyed; capacity $2; $3
	// expired keys deleted; body hash $4.
	applyEffect = `WITH s AS (
	UPDATE state SET counter = counter + 1, keys = keys + $1::bigint - $3::bigint
	WHERE id = 1 AND ($1::bigint = 0 OR keys - $3::bigint < $2::bigint)
	RETURNING counter
)
INSERT INTO effects (value, body_sha256) SELECT counter, $4 FROM s RETURNING value`
	recordKeys = `UPDATE keys SET value = u.v, recorded_at = $3
FROM unnest($1::text[], $2::bigint[]) AS u(k, v) WHERE keys.key = u.k`
	recordKey = `UPDATE keys SET value = $2, recorded_at = $3 WHERE key = $1`
	// dropClaims deletes this transaction's claims of intents without effect.
	dropClaims = `DELETE FROM keys WHERE key = ANY($1::text[]) AND value IS NULL`
)

// SQLSTATE codes after which a transaction is run again.
const (
	deadlockDetected     = "40P01"
	serializationFailure = "40001"
)

// errClosed is Apply's answer after Close.
var errClosed = errors.New("store closed")

// pending is an intent waiting for its answer.
type pending struct {
	in          store.Intent
	afterEffect func() error
	hooked      bool // afterEffect returned nil once: never called again
}

type queued = groupcommit.Call[*pending, outcome]

// outcome is an intent's answer; alone hands it back for Apply to run in
// a transaction of its own, panicked is for Apply to panic with.
type outcome struct {
	res      store.Result
	err      error
	alone    bool
	panicked any
}

// errPanicked is the answer of an intent whose afterEffect panicked.
var errPanicked = errors.New("afterEffect panicked")

// callAfterEffect calls p's afterEffect, recovering a panic.
func (p *pending) callAfterEffect() (panicked any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked, err = r, errPanicked
		}
	}()
	return nil, p.afterEffect()
}

// Stats counts what Apply's transactions did.
type Stats struct {
	Commits   int64 // transactions committed with at least one effect
	Intents   int64 // effects they committed; Intents/Commits is the mean batch
	Retries   int64 // transactions run again after a deadlock or serialization failure
	Deadlocks int64 // transactions PostgreSQL aborted as deadlocks (SQLSTATE 40P01)
}

func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Intents: s.intents.Load(), Retries: s.retries.Load(), Deadlocks: s.deadlocks.Load()}
}

// splitDuplicates splits batch into intents whose key no earlier one has,
// and the others.
func splitDuplicates(batch []*queued) (first, later []*queued) {
	seen := make(map[string]bool, len(batch))
	first = batch[:0:0]
	for _, q := range batch {
		k := q.Arg.in.Key
		if k != "" && seen[k] {
			later = append(later, q)
			continue
		}
		seen[k] = k != ""
		first = append(first, q)
	}
	return first, later
}

// commitBatch is the committer's run: a key appears once in a transaction,
// so an intent whose key an earlier intent of batch holds is carried over
// to the next batch, where it finds the first one's outcome committed.
func (s *Store) commitBatch(batch []*queued) (carry []*queued) {
	batch, carry = splitDuplicates(batch)
	s.runBatch(batch)
	return carry
}

// runBatch runs batch, whose keys are distinct, in one transaction.
func (s *Store) runBatch(batch []*queued) {
	ms := make([]*member, len(batch))
	for i, q := range batch {
		ms[i] = &member{p: q.Arg}
	}
	s.run(ms, false)
	for i, m := range ms {
		batch[i].Answer(m.out)
	}
}

// applyAlone runs p in a transaction of its own and returns its answer.
func (s *Store) applyAlone(p *pending) outcome {
	m := &member{p: p}
	s.run([]*member{m}, true)
	return m.out
}

// member is an intent in one transaction, and what was decided for it.
type member struct {
	p      *pending
	out    outcome
	done   bool  // out is its answer
	owner  bool  // applies its effect in this attempt
	freed  int64 // expired rows of its key this attempt deleted (alone)
	value  int64 // its effect's counter value, if owner
	failed bool  // its afterEffect failed this attempt: out holds the error
	full   bool  // refused for want of a place this attempt
}

func (m *member) answer(res store.Result, err error) {
	m.out, m.done = outcome{res: res, err: err}, true
}

func (m *member) keyed() bool { return m.p.in.Key != "" }

// run runs the transaction of ms until it commits or fails, retrying
// deadlocks and serialization failures; every member is answered.
func (s *Store) run(ms []*member, alone bool) {
	for attempt := 1; ; attempt++ {
		err := s.transact(ms, alone)
		if err == nil {
			return
		}
		if retryable(err) {
			if pgErr, _ := errors.AsType[*pgconn.PgError](err); pgErr.Code == deadlockDetected {
				s.deadlocks.Add(1)
			}
			if attempt < maxAttempts {
				s.retries.Add(1)
				for _, m := range ms {
					if m.full { // the places were taken by effects now rolled back
						m.done, m.full = false, false
					}
				}
				continue
			}
			err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		for _, m := range ms {
			if !m.done {
				m.answer(store.Result{}, err)
			}
		}
		return
	}
}

// transact runs one attempt for the members not yet answered, answering
// those it can; an error means the transaction as a whole failed.
func (s *Store) transact(ms []*member, alone bool) error {
	ctx := context.Background()
	ms = slices.DeleteFunc(slices.Clone(ms), func(m *member) bool { return m.done })
	if len(ms) == 0 {
		return nil
	}
	for _, m := range ms {
		m.owner, m.freed, m.value, m.failed = !m.keyed(), 0, 0, false
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.fail("connect", err)
	}
	defer conn.Release() // a connection closed or left in a transaction is dropped from the pool
	t := &txn{s: s, ctx: ctx, conn: conn}
	defer t.rollback()
	if alone {
		err = t.claimAlone(ms[0])
	} else {
		err = t.claimBatch(ms)
	}
	if err != nil {
		return err
	}
	owners := slices.DeleteFunc(slices.Clone(ms), func(m *member) bool { return m.done || !m.owner })
	if len(owners) == 0 {
		return nil
	}
	return t.apply(owners)
}

// txn is one attempt's transaction on conn.
type txn struct {
	s         *Store
	ctx       context.Context
	conn      *pgxpool.Conn
	begun     bool      // BEGIN was sent
	locked    bool      // the state row is locked outside any savepoint
	savepoint bool      // the effects are inside savepoint "effects"
	refused   []*member // keyed owners answered store.ErrFull
}

// send runs b's statements in one round trip, BEGIN first if need be.
func (t *txn) send(b *pgx.Batch) error {
	if !t.begun {
		b.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: "BEGIN"}}, b.QueuedQueries...)
		t.begun = true
	}
	return t.conn.SendBatch(t.ctx, b).Close()
}

// rollback ends the transaction unless it committed; a connection that
// cannot is closed, and so dropped from the pool.
func (t *txn) rollback() {
	if !t.begun || t.conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	if _, err := t.conn.Exec(t.ctx, "ROLLBACK"); err != nil {
		t.conn.Conn().Close(t.ctx)
	}
}

func (t *txn) fail(what string, err error) error { return t.s.failConn(t.conn, what, err) }

// claimBatch claims the keyed members' keys in one statement, in key
// order, waiting at most tryTimeout for a held key; if it fails, each key
// is claimed by itself (claimEach).
func (t *txn) claimBatch(ms []*member) error {
	keyed := slices.DeleteFunc(slices.Clone(ms), func(m *member) bool { return !m.keyed() })
	if len(keyed) == 0 {
		return nil
	}
	slices.SortFunc(keyed, func(a, b *member) int { return strings.Compare(a.p.in.Key, b.p.in.Key) })
	keys := make([]string, len(keyed))
	fps := make([][]byte, len(keyed))
	for i, m := range keyed {
		keys[i], fps[i] = m.p.in.Key, m.p.in.Fingerprint[:]
	}
	inserted := make(map[string]bool, len(keyed))
	b := &pgx.Batch{}
	b.Queue(t.s.tryTimeout)
	if len(keyed) == 1 { // the one-row statement costs PostgreSQL less
		b.Queue(claimKey, keys[0], fps[0]).Exec(func(tag pgconn.CommandTag) error {
			inserted[keys[0]] = tag.RowsAffected() == 1
			return nil
		})
	} else {
		b.Queue(claimKeys, keys, fps).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					return err
				}
				inserted[k] = true
			}
			return rows.Err()
		})
	}
	b.Queue(t.s.busyTimeout)
	if err := t.send(b); err != nil {
		if t.conn.Conn().IsClosed() || retryable(err) {
			return t.fail(fmt.Sprintf("claim %d keys", len(keys)), err)
		}
		return t.claimEach(keyed)
	}
	var rest []*member
	for _, m := range keyed {
		if inserted[m.p.in.Key] {
			m.owner = true
		} else {
			rest = append(rest, m)
		}
	}
	return t.readClaimed(rest)
}

// claimEach claims each key of keyed in a savepoint of its own: a held key
// sends its member alone, another error is that member's answer alone.
func (t *txn) claimEach(keyed []*member) error {
	if _, err := t.conn.Exec(t.ctx, "ROLLBACK"); err != nil {
		return t.fail("roll back the batch's claims", err)
	}
	t.begun = false
	var rest []*member
	for i, m := range keyed {
		var inserted int64
		b := &pgx.Batch{}
		if i == 0 {
			b.Queue(t.s.tryTimeout)
		}
		b.Queue(`SAVEPOINT claim`)
		b.Queue(claimKey, m.p.in.Key, m.p.in.Fingerprint[:]).Exec(func(tag pgconn.CommandTag) error {
			inserted = tag.RowsAffected()
			return nil
		})
		b.Queue(`RELEASE claim`)
		err := t.send(b)
		switch {
		case err == nil && inserted == 1:
			m.owner = true
			continue
		case err == nil:
			rest = append(rest, m)
			continue
		case t.conn.Conn().IsClosed() || retryable(err):
			return t.fail(fmt.Sprintf("claim key %q", m.p.in.Key), err)
		}
		if _, rerr := t.conn.Exec(t.ctx, `ROLLBACK TO claim; RELEASE claim`); rerr != nil {
			return t.fail(fmt.Sprintf("roll back the claim of key %q after %v", m.p.in.Key, err), rerr)
		}
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == lockNotAvailable {
			m.out, m.done = outcome{alone: true}, true
			continue
		}
		m.answer(store.Result{}, t.fail(fmt.Sprintf("claim key %q", m.p.in.Key), err))
	}
	if _, err := t.conn.Exec(t.ctx, t.s.busyTimeout); err != nil {
		return t.fail("set lock_timeout", err)
	}
	return t.readClaimed(rest)
}

// readClaimed answers the members whose key another transaction recorded;
// an expired or vanished row sends its member alone.
func (t *txn) readClaimed(ms []*member) error {
	if len(ms) == 0 {
		return nil
	}
	keys := make([]string, len(ms))
	for i, m := range ms {
		keys[i] = m.p.in.Key
	}
	type row struct {
		fp                []byte
		value, recordedAt *int64
	}
	rows := make(map[string]row, len(ms))
	b := &pgx.Batch{}
	b.Queue(readKeys, keys).Query(func(rs pgx.Rows) error {
		for rs.Next() {
			var k string
			var r row
			if err := rs.Scan(&k, &r.fp, &r.value, &r.recordedAt); err != nil {
				return err
			}
			rows[k] = r
		}
		return rs.Err()
	})
	if err := t.send(b); err != nil {
		return t.fail(fmt.Sprintf("read %d keys", len(keys)), err)
	}
	for _, m := range ms {
		r, ok := rows[m.p.in.Key]
		switch {
		case !ok || t.s.expired(r.recordedAt):
			m.out, m.done = outcome{alone: true}, true
		default:
			m.answer(t.s.recorded(m.p.in, r.fp, r.value))
		}
	}
	return nil
}

// recorded is the answer to in from its key's committed, unexpired row.
func (s *Store) recorded(in store.Intent, fp []byte, value *int64) (store.Result, error) {
	switch {
	case value == nil:
		return store.Result{}, fmt.Errorf("postgres store %s: key %q committed without a value", s.dsn, in.Key)
	case string(fp) != string(in.Fingerprint[:]):
		return store.Result{}, store.ErrConflict
	}
	return store.Result{Value: *value, Replayed: true}, nil
}

// claimAlone claims m's key, waiting at most the store's wait for a holder
// (then store.ErrInProgress); an expired key is deleted and claimed anew.
func (t *txn) claimAlone(m *member) error {
	if !m.keyed() {
		return nil
	}
	in := m.p.in
	for range maxClaims {
		var inserted int64
		b := &pgx.Batch{}
		b.Queue(t.s.claimTimeout)
		b.Queue(claimKey, in.Key, in.Fingerprint[:]).Exec(func(tag pgconn.CommandTag) error {
			inserted = tag.RowsAffected()
			return nil
		})
		b.Queue(t.s.busyTimeout)
		if err := t.send(b); err != nil {
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == lockNotAvailable {
				m.answer(store.Result{}, store.ErrInProgress)
				return nil
			}
			return t.fail(fmt.Sprintf("claim key %q", in.Key), err)
		}
		if inserted == 1 {
			m.owner = true
			return nil
		}
		var fp []byte
		var value, recordedAt *int64
		err := t.conn.QueryRow(t.ctx, readKey, in.Key).Scan(&fp, &value, &recordedAt)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // removed since the claim: claim it again
		case err != nil:
			return t.fail(fmt.Sprintf("read key %q", in.Key), err)
		case !t.s.expired(recordedAt):
			m.answer(t.s.recorded(in, fp, value))
			return nil
		}
		// Expired: the count of keys drops with this transaction's
		// effect (freed), so the state row is still locked after the key's.
		n, err := t.s.expireKey(t.ctx, t.conn, in.Key)
		if err != nil {
			return t.fail(fmt.Sprintf("expire key %q", in.Key), err)
		}
		m.freed += n
	}
	m.answer(store.Result{}, fmt.Errorf("postgres store %s: key %q: claimed %d times, and each time another transaction had removed its row", t.s.dsn, in.Key, maxClaims))
	return nil
}

// apply runs the owners' effects in one statement, each afterEffect in
// order, then records and commits. A failed callback rolls the effects
// back to the savepoint and runs them again without its owner.
func (t *txn) apply(owners []*member) error {
	fit, err := t.effects(&pgx.Batch{}, owners)
	if err != nil {
		return err
	}
	if !fit {
		if owners, err = t.refuseFull(owners); err != nil || len(owners) == 0 {
			return err
		}
	}
	var failed []string
	for _, m := range owners {
		if m.p.hooked {
			continue
		}
		if panicked, err := m.p.callAfterEffect(); err != nil {
			m.answer(store.Result{}, err)
			m.out.panicked = panicked
			m.failed = true
			if m.keyed() {
				failed = append(failed, m.p.in.Key)
			}
			continue
		}
		m.p.hooked = true
	}
	if survivors := slices.DeleteFunc(slices.Clone(owners), func(m *member) bool { return m.failed }); len(survivors) < len(owners) {
		// The failed owners' places are free again: an intent refused
		// for want of one might have had it alone, so it runs alone.
		for _, m := range t.refused {
			m.out = outcome{alone: true}
		}
		if len(survivors) == 0 {
			return nil // nothing to commit: rolled back
		}
		b := &pgx.Batch{}
		b.Queue(`ROLLBACK TO effects`)
		if len(failed) > 0 {
			b.Queue(dropClaims, failed)
		}
		fit, err := t.effects(b, survivors)
		if err == nil && !fit {
			err = fmt.Errorf("postgres store %s: %d effects no longer fit after %d callbacks failed", t.s.dsn, len(survivors), len(owners)-len(survivors))
		}
		if err != nil {
			return err
		}
		owners = survivors
	}
	return t.commit(owners)
}

// effects sends b's statements and the owners' effects, setting each
// owner's value, or reports !fit (nothing applied). A lone owner needs
// neither state lock nor savepoint: its failure rolls everything back.
func (t *txn) effects(b *pgx.Batch, owners []*member) (fit bool, err error) {
	var keyed, freed int64
	shas := make([]string, len(owners))
	for i, m := range owners {
		shas[i] = m.p.in.Fingerprint.Hex()
		if m.keyed() {
			keyed++
		}
		freed += m.freed
	}
	var counter int64
	if t.savepoint = len(owners) > 1; t.savepoint {
		if !t.locked {
			b.Queue(lockState)
			t.locked = true
		}
		b.Queue(`SAVEPOINT effects`)
	}
	scan := func(r pgx.Row) error {
		err := r.Scan(&counter)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		fit = err == nil
		return err
	}
	if len(owners) == 1 { // the one-row statement costs PostgreSQL less
		b.Queue(applyEffect, keyed, t.s.capacity, freed, shas[0]).QueryRow(scan)
	} else {
		b.Queue(applyEffects, len(owners), keyed, t.s.capacity, freed, shas).QueryRow(scan)
	}
	if err := t.send(b); err != nil {
		return false, t.fail(fmt.Sprintf("apply %d effects", len(owners)), err)
	}
	if !fit {
		return false, nil
	}
	first := counter - int64(len(owners))
	for i, m := range owners {
		m.value = first + int64(i) + 1
	}
	return true, nil
}

// refuseFull, when the keyed owners do not all fit, purges expired keys,
// answers the keyed owners beyond the free places store.ErrFull, and
// applies the others' effects. It returns the owners left.
func (t *txn) refuseFull(owners []*member) ([]*member, error) {
	b := &pgx.Batch{}
	if t.savepoint {
		b.Queue(`RELEASE effects`)
	}
	var keys int64
	scan := func(r pgx.Row) error { return r.Scan(&keys) }
	if cut, ok := t.s.cut(); ok {
		b.Queue(purgeKeys, cut).QueryRow(scan)
	} else {
		b.Queue(lockState).QueryRow(scan)
	}
	t.locked = true
	if err := t.send(b); err != nil {
		return nil, t.fail("purge expired keys", err)
	}
	places := t.s.capacity - keys
	var left []*member
	var refused []string
	for _, m := range owners {
		places += m.freed
		switch {
		case !m.keyed():
		case places > 0:
			places--
		default:
			m.answer(store.Result{}, store.ErrFull)
			m.full = true
			refused = append(refused, m.p.in.Key)
			t.refused = append(t.refused, m)
			continue
		}
		left = append(left, m)
	}
	if len(left) == 0 {
		return nil, nil
	}
	b = &pgx.Batch{}
	if len(refused) > 0 {
		b.Queue(dropClaims, refused)
	}
	fit, err := t.effects(b, left)
	if err == nil && !fit {
		err = fmt.Errorf("postgres store %s: %d effects do not fit after refusing %d keys", t.s.dsn, len(left), len(refused))
	}
	return left, err
}

// commit records the owners' keys and commits, then answers the owners.
func (t *txn) commit(owners []*member) error {
	var keys []string
	var values []int64
	for _, m := range owners {
		if m.keyed() {
			keys, values = append(keys, m.p.in.Key), append(values, m.value)
		}
	}
	var recorded int64
	count := func(tag pgconn.CommandTag) error {
		recorded = tag.RowsAffected()
		return nil
	}
	b := &pgx.Batch{}
	switch now := t.s.Now().UnixMilli(); len(keys) {
	case 0:
	case 1: // the one-row statement costs PostgreSQL less
		b.Queue(recordKey, keys[0], values[0], now).Exec(count)
	default:
		b.Queue(recordKeys, keys, values, now).Exec(count)
	}
	b.Queue(`COMMIT`)
	if err := t.send(b); err != nil {
		return t.fail(fmt.Sprintf("commit effects %d to %d", owners[0].value, owners[len(owners)-1].value), err)
	}
	// The keys' rows are this transaction's claims: none can be gone.
	if recorded != int64(len(keys)) {
		return fmt.Errorf("postgres store %s: recorded %d keys of %d", t.s.dsn, recorded, len(keys))
	}
	t.s.commits.Add(1)
	t.s.intents.Add(int64(len(owners)))
	for _, m := range owners {
		m.answer(store.Result{Value: m.value}, nil)
	}
	return nil
}

// retryable reports whether err is a deadlock or a serialization failure.
func retryable(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pgErr.Code == deadlockDetected || pgErr.Code == serializationFailure)
}

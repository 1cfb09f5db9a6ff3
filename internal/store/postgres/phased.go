package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"idemlab/internal/store"
)

// The postgres store's store.Phased: one row per live key in claims,
// claimed (value NULL) or recorded. Claim decides under a transaction
// advisory lock, so replicas' claims happen in one order, each reading the
// last one's commit: the order SQLite's write lock gives the durable store.

// claimsLock is the advisory lock key Claim holds for its transaction.
const claimsLock = 0x1de71ac

// cut is KeyClock.ExpiredBefore now.
func (s *Store) cut() (ms int64, ok bool) { return s.ExpiredBefore(s.Now()) }

// expired reports whether a key recorded at recordedAt (Unix ms; nil: not
// recorded) is past the key TTL.
func (s *Store) expired(recordedAt *int64) bool {
	cut, ok := s.cut()
	return ok && recordedAt != nil && *recordedAt <= cut
}

// expireKey deletes Apply's expired key and returns how many rows went.
// The state row's count drops with the effect, not here: the state row is
// always locked after every key's row.
func (s *Store) expireKey(ctx context.Context, conn *pgxpool.Conn, key string) (int64, error) {
	cut, _ := s.cut()
	tag, err := conn.Exec(ctx, `DELETE FROM keys WHERE key = $1 AND recorded_at <= $2`, key, cut)
	return tag.RowsAffected(), err
}

// purgeKeys deletes Apply's keys recorded at or before $1 and returns the
// count left. It skips locked rows: holding the state row, it must not
// wait for a key's.
const purgeKeys = `WITH d AS (
	DELETE FROM keys WHERE key IN (
		SELECT key FROM keys WHERE value IS NOT NULL AND recorded_at <= $1 FOR UPDATE SKIP LOCKED)
	RETURNING 1
)
UPDATE state SET keys = keys - (SELECT count(*) FROM d) WHERE id = 1 RETURNING keys`

// Claim claims in's key for lease in one transaction (see store.Phased).
func (s *Store) Claim(in store.Intent, lease time.Duration) (store.Claim, error) {
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Claim{}, s.fail("claim: begin", err)
	}
	defer tx.Rollback(ctx) // after Commit, a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, claimsLock); err != nil {
		return store.Claim{}, s.fail(fmt.Sprintf("claim key %q: lock", in.Key), err)
	}
	t := s.Now()
	var fp []byte
	var token string
	var leaseUntil int64
	var value, recordedAt *int64
	err = tx.QueryRow(ctx, `SELECT fingerprint, token, lease_until, value, recorded_at FROM claims WHERE key = $1`, in.Key).
		Scan(&fp, &token, &leaseUntil, &value, &recordedAt)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return store.Claim{}, s.fail(fmt.Sprintf("claim key %q: read", in.Key), err)
	}
	if found && value != nil && s.expired(recordedAt) {
		if _, err := tx.Exec(ctx, `DELETE FROM claims WHERE key = $1`, in.Key); err != nil {
			return store.Claim{}, s.fail(fmt.Sprintf("claim key %q: expire", in.Key), err)
		}
		found = false
	}
	var held *store.Held
	if found {
		held = &store.Held{Fingerprint: fp, LeaseUntil: time.UnixMilli(leaseUntil), Recorded: value != nil}
		if value != nil {
			held.Value = *value
		}
	}
	c, err := store.Decide(in, held, t, lease, func() (bool, error) {
		full, err := s.claimsFull(ctx, tx)
		if err != nil {
			err = s.fail(fmt.Sprintf("claim key %q: count", in.Key), err)
		}
		return full, err
	})
	switch {
	case err != nil:
		return store.Claim{}, err
	case c.State == store.Owned && c.TakenOver:
		if _, err := tx.Exec(ctx, `UPDATE claims SET token = $2, lease_until = $3 WHERE key = $1`, in.Key, c.Token, c.LeaseUntil.UnixMilli()); err != nil {
			return store.Claim{}, s.fail(fmt.Sprintf("claim key %q: take over", in.Key), err)
		}
	case c.State == store.Owned:
		_, err = tx.Exec(ctx, `INSERT INTO claims (key, fingerprint, token, lease_until) VALUES ($1, $2, $3, $4)`,
			in.Key, in.Fingerprint[:], c.Token, c.LeaseUntil.UnixMilli())
		if err != nil {
			return store.Claim{}, s.fail(fmt.Sprintf("claim key %q: insert", in.Key), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Claim{}, s.fail(fmt.Sprintf("claim key %q: commit", in.Key), err)
	}
	return c, nil
}

// claimsFull reports whether capacity live keys are held, deleting expired
// ones first if the table is full.
func (s *Store) claimsFull(ctx context.Context, tx pgx.Tx) (bool, error) {
	var n int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM claims`).Scan(&n); err != nil {
		return false, err
	}
	cut, ok := s.cut()
	if n < s.capacity || !ok {
		return n >= s.capacity, nil
	}
	tag, err := tx.Exec(ctx, `DELETE FROM claims WHERE value IS NOT NULL AND recorded_at <= $1`, cut)
	if err != nil {
		return false, err
	}
	return n-tag.RowsAffected() >= s.capacity, nil
}

// Complete records value for key, if token still holds its claim.
func (s *Store) Complete(key, token string, value int64) error {
	return s.holding(fmt.Sprintf("complete key %q", key), `UPDATE claims SET value = $3, recorded_at = $4 WHERE key = $1 AND token = $2 AND value IS NULL`,
		key, token, value, s.Now().UnixMilli())
}

// Release deletes key's claim, if token still holds it.
func (s *Store) Release(key, token string) error {
	return s.holding(fmt.Sprintf("release key %q", key), `DELETE FROM claims WHERE key = $1 AND token = $2 AND value IS NULL`, key, token)
}

// holding runs a statement on one claim: store.ErrClaimLost unless it
// changed one row.
func (s *Store) holding(what, sql string, args ...any) error {
	tag, err := s.pool.Exec(context.Background(), sql, args...)
	if err != nil {
		return s.fail(what, err)
	}
	if tag.RowsAffected() != 1 {
		return store.ErrClaimLost
	}
	return nil
}

package durable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"idemlab/internal/store"
)

// The durable store's store.Phased: one row per live key in claims,
// claimed (value NULL) or recorded, each phase its own BEGIN IMMEDIATE
// transaction so that processes sharing the folder see one order.

// Claim claims in's key for lease in one transaction (see store.Phased).
func (s *Store) Claim(in store.Intent, lease time.Duration) (store.Claim, error) {
	var c store.Claim
	err := s.phase("claim key "+in.Key, func(tx *sql.Tx) (bool, error) {
		t := s.Now()
		var fp []byte
		var token string
		var leaseUntil int64
		var value, recordedAt sql.NullInt64
		err := tx.QueryRow(`SELECT fingerprint, token, lease_until, value, recorded_at FROM claims WHERE key = ?`, in.Key).
			Scan(&fp, &token, &leaseUntil, &value, &recordedAt)
		found := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, err
		}
		if cut, ok := s.ExpiredBefore(t); found && value.Valid && ok && recordedAt.Int64 <= cut {
			if _, err := tx.Exec(`DELETE FROM claims WHERE key = ?`, in.Key); err != nil {
				return false, err
			}
			found = false
		}
		var held *store.Held
		if found {
			held = &store.Held{Fingerprint: fp, LeaseUntil: time.UnixMilli(leaseUntil), Recorded: value.Valid, Value: value.Int64}
		}
		c, err = store.Decide(in, held, t, lease, func() (bool, error) { return s.claimsFull(tx, t) })
		switch {
		case err != nil:
			return false, err
		case c.State != store.Owned:
			return true, nil // commits the expired rows it deleted, if any
		case c.TakenOver:
			_, err = tx.Exec(`UPDATE claims SET token = ?, lease_until = ? WHERE key = ?`, c.Token, c.LeaseUntil.UnixMilli(), in.Key)
		default:
			_, err = tx.Exec(`INSERT INTO claims (key, fingerprint, token, lease_until) VALUES (?, ?, ?, ?)`,
				in.Key, in.Fingerprint[:], c.Token, c.LeaseUntil.UnixMilli())
		}
		return true, err
	})
	if err != nil {
		return store.Claim{}, err
	}
	return c, nil
}

// claimsFull reports whether capacity live keys are held, deleting expired
// ones first if the table is full.
func (s *Store) claimsFull(tx *sql.Tx, t time.Time) (bool, error) {
	var n int64
	if err := tx.QueryRow(`SELECT count(*) FROM claims`).Scan(&n); err != nil {
		return false, err
	}
	cut, ok := s.ExpiredBefore(t)
	if n < s.capacity || !ok {
		return n >= s.capacity, nil
	}
	res, err := tx.Exec(`DELETE FROM claims WHERE value IS NOT NULL AND recorded_at <= ?`, cut)
	if err != nil {
		return false, err
	}
	gone, err := res.RowsAffected()
	return n-gone >= s.capacity, err
}

// Complete records value for key in one transaction, if token still holds
// its claim (see store.Phased).
func (s *Store) Complete(key, token string, value int64) error {
	return s.phase("complete key "+key, func(tx *sql.Tx) (bool, error) {
		res, err := tx.Exec(`UPDATE claims SET value = ?, recorded_at = ? WHERE key = ? AND token = ? AND value IS NULL`,
			value, s.Now().UnixMilli(), key, token)
		return lostUnlessOne(res, err)
	})
}

// Release deletes key's claim in one transaction, if token still holds it.
func (s *Store) Release(key, token string) error {
	return s.phase("release key "+key, func(tx *sql.Tx) (bool, error) {
		res, err := tx.Exec(`DELETE FROM claims WHERE key = ? AND token = ? AND value IS NULL`, key, token)
		return lostUnlessOne(res, err)
	})
}

// lostUnlessOne is store.ErrClaimLost unless the statement changed one row.
func lostUnlessOne(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return false, err
	case n != 1:
		return false, store.ErrClaimLost
	}
	return true, nil
}

// phase runs f in one write transaction, committed when f says so; the
// store's refusals come back unwrapped.
func (s *Store) phase(what string, f func(tx *sql.Tx) (commit bool, err error)) error {
	tx, err := s.db.BeginTx(context.Background(), nil) // BEGIN IMMEDIATE (see dsn)
	if err != nil {
		return fmt.Errorf("durable store %s: %s: begin: %w", s.path, what, err)
	}
	commit, err := f(tx)
	if err == nil && !commit {
		return tx.Rollback()
	}
	if err != nil {
		tx.Rollback()
		if refusal(err) {
			return err
		}
		return fmt.Errorf("durable store %s: %s: %w", s.path, what, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("durable store %s: %s: commit: %w", s.path, what, err)
	}
	return nil
}

// refusal reports whether err is one of the store's answers rather than a failure.
func refusal(err error) bool {
	return errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrFull) || errors.Is(err, store.ErrClaimLost)
}

// purgeKeys deletes Apply's keys recorded at or before cut (Unix ms) and
// returns how many remain.
func (s *Store) purgeKeys(st *[len(statements)]*sql.Stmt, cut int64) (keys int64, err error) {
	if _, err := st[purge].Exec(cut); err != nil {
		return 0, fmt.Errorf("durable store %s: expire keys: %w", s.path, err)
	}
	if err := st[recount].QueryRow().Scan(&keys); err != nil {
		return 0, fmt.Errorf("durable store %s: count keys: %w", s.path, err)
	}
	return keys, nil
}

// Command go-postgres is a sound member of the idemlab zoo: keys and results
// in PostgreSQL, shared by every replica. The owner of a key holds a session
// advisory lock on it while its effect runs; a duplicate blocks on that lock
// (4 s at most, then 409) and replays what the owner recorded. A crashed
// owner's session dies with it, and so does its lock: the next request
// takes the claim over at once and runs the effect again, forwarding the
// key, so the sink does not apply it twice. Success is 200; every keyed
// reply says X-Idempotent-Replay: yes or no.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"idemlab/zoo/zoohttp"
)

var keySyntax = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 40
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "4s"
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	// Replicas start together: the table is created once, under a lock.
	_, err = db.Exec(ctx, `SELECT pg_advisory_lock(0);
		CREATE TABLE IF NOT EXISTS idem (key text PRIMARY KEY, fp text NOT NULL, value text);
		SELECT pg_advisory_unlock(0)`)
	if err != nil {
		log.Fatal(err)
	}
	zoohttp.Serve(handler(db))
}

func handler(db *pgxpool.Pool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, ok := zoohttp.ReadRequest(w, r, keySyntax)
		switch {
		case !ok: // ReadRequest answered it: 413 or 400
		case !req.Keyed:
			if value, err := zoohttp.Effect(req.Body, ""); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
			} else {
				io.WriteString(w, value)
			}
		default:
			sum := sha256.Sum256(req.Body)
			status, value, replayed := keyed(db, req.Key, hex.EncodeToString(sum[:]), req.Body)
			w.Header().Set("X-Idempotent-Replay", map[bool]string{true: "yes", false: "no"}[replayed])
			if status == http.StatusConflict {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(status)
			io.WriteString(w, value)
		}
	}
}

// keyed answers a keyed request: it holds the key's advisory lock on one
// connection, then replays, refuses another body, or claims the key (or a
// dead owner's claim) and runs the effect.
func keyed(db *pgxpool.Pool, key, fp string, body []byte) (status int, value string, replayed bool) {
	ctx := context.Background() // not the request's: a client that gives up cancels nothing
	conn, err := db.Acquire(ctx)
	if err != nil {
		return http.StatusServiceUnavailable, err.Error(), false
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" { // lock_timeout: the owner still runs
			return http.StatusConflict, "a request with this key is in progress\n", false
		}
		conn.Conn().Close(ctx) // its session may hold the lock: never reuse it
		return http.StatusServiceUnavailable, err.Error(), false
	}
	defer func() {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
			conn.Conn().Close(ctx)
		}
	}()
	var storedFP string
	var stored *string
	err = conn.QueryRow(ctx, `SELECT fp, value FROM idem WHERE key = $1`, key).Scan(&storedFP, &stored)
	switch {
	case err == nil && storedFP != fp:
		return http.StatusUnprocessableEntity, "Idempotency-Key reused with another body\n", false
	case err == nil && stored != nil:
		return http.StatusOK, *stored, true
	case errors.Is(err, pgx.ErrNoRows):
		_, err = conn.Exec(ctx, `INSERT INTO idem (key, fp) VALUES ($1, $2)`, key, fp)
	}
	// Here the key is new and claimed, or its claim's owner died: we hold
	// the lock it held.
	if err != nil {
		return http.StatusServiceUnavailable, err.Error(), false
	}
	v, err := zoohttp.Effect(body, key)
	if err != nil {
		conn.Exec(ctx, `DELETE FROM idem WHERE key = $1`, key) // released: a retry runs again
		return http.StatusBadGateway, "effect failed: " + err.Error() + "\n", false
	}
	if _, err := conn.Exec(ctx, `UPDATE idem SET value = $2 WHERE key = $1`, key, v); err != nil {
		return http.StatusServiceUnavailable, err.Error(), false
	}
	return http.StatusOK, v, false
}

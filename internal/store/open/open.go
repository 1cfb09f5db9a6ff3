// Package open maps a store name (protocol.Store) to its implementation:
// it opens a server's store and reads the state servers left there. It is
// the only package that knows every store.
package open

import (
	"context"
	"errors"
	"fmt"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
	"idemlab/internal/store/durable"
	"idemlab/internal/store/postgres"
	"idemlab/internal/store/volatile"
)

// A Place is where a store keeps its state (store.Place).
type Place = store.Place

// connectWithin bounds connecting to a database store.
const connectWithin = 15 * time.Second

// Store opens the store called kind at p for capacity keys; wait bounds a
// duplicate's wait for an owner on another replica (postgres only).
func Store(kind protocol.Store, p Place, capacity int, wait time.Duration) (store.Store, error) {
	switch kind {
	case protocol.Volatile:
		return volatile.Open(p.Dir)
	case protocol.Durable:
		return durable.Open(p.Dir, capacity)
	case protocol.Postgres:
		if p.DSN == "" {
			return nil, errors.New("postgres store: no database given (-dsn)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), connectWithin)
		defer cancel()
		return postgres.Open(ctx, p.DSN, capacity, wait)
	}
	_, err := protocol.ParseStore(string(kind))
	return nil, err
}

// ReadState reads the state servers of store kind left at p, once all
// have exited; no state reads as zero. The effects are exactly values 1
// to Counter: one a crash cut off before it was durable is not listed.
func ReadState(kind protocol.Store, p Place) (store.State, error) {
	var (
		st  store.State
		err error
	)
	switch kind {
	case protocol.Volatile:
		st, err = volatile.ReadState(p.Dir)
	case protocol.Durable:
		st, err = durable.ReadState(p.Dir)
	case protocol.Postgres:
		ctx, cancel := context.WithTimeout(context.Background(), connectWithin)
		defer cancel()
		st, err = postgres.ReadState(ctx, p.DSN)
	default:
		_, err = protocol.ParseStore(string(kind))
		return store.State{}, fmt.Errorf("read state: %w", err)
	}
	if err != nil {
		return store.State{}, fmt.Errorf("read %s state: %w", kind, err)
	}
	return st, nil
}

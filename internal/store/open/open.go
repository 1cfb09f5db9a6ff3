// Package open maps a store name (protocol.Store) to its
// implementation: it opens the store a server runs on, and reads what
// servers left there after they exited, the counter and the journal of
// applied effects that the lab counts from.
//
// It is the only package that knows every store: the server opens its store
// through it, and the runner and the experiments read state through it
// without importing the server.
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

// Store opens the store called kind at p, for a server holding at most
// capacity keys whose duplicates wait at most wait for an owner on another
// replica (a database store only; the registry bounds the rest).
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

// ReadState reads the state servers of store kind left at p; call it after
// every server on p has exited. A place without state reads as a zero
// counter and no effects. The effects are exactly the counter's (values 1
// to Counter, in order): an effect a crash cut off before it became durable
// is not listed. Volatile state is DIR/counter and DIR/effects.log; durable
// state is the database DIR/state.db; postgres state is the database p.DSN.
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

// Package statedir maps a store name (protocol.Store) to its
// implementation: it opens the store a server runs on over its state
// folder, and reads what a server left there after it exited, the counter
// and the journal of applied effects that the lab counts from.
//
// It is the only package that knows every store: the server opens its store
// through it, and the runner and the experiments read state through it
// without importing the server.
package statedir

import (
	"fmt"

	"idemlab/internal/counterfile"
	"idemlab/internal/durablestore"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// Open opens the store called kind over the state folder dir, for a server
// holding at most capacity keys.
func Open(kind protocol.Store, dir string, capacity int) (store.Store, error) {
	switch kind {
	case protocol.Volatile:
		return counterfile.Open(dir)
	case protocol.Durable:
		return durablestore.Open(dir, capacity)
	}
	_, err := protocol.ParseStore(string(kind))
	return nil, err
}

// Read reads the state a server of store kind left in dir; call it after
// every server on dir has exited. A folder without state reads as a zero
// counter and no effects. The effects are exactly the counter's (values 1
// to Counter, in order): an effect a crash cut off before it became durable
// is not listed. Volatile state is DIR/counter and DIR/effects.log; durable
// state is the database DIR/state.db.
func Read(kind protocol.Store, dir string) (store.State, error) {
	var (
		st  store.State
		err error
	)
	switch kind {
	case protocol.Volatile:
		st, err = counterfile.ReadState(dir)
	case protocol.Durable:
		st, err = durablestore.ReadState(dir)
	default:
		_, err = protocol.ParseStore(string(kind))
		return store.State{}, fmt.Errorf("read state: %w", err)
	}
	if err != nil {
		return store.State{}, fmt.Errorf("read %s state: %w", kind, err)
	}
	return st, nil
}

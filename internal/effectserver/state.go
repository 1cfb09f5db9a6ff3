package effectserver

import (
	"fmt"

	"idemlab/internal/counterfile"
	"idemlab/internal/durablestore"
)

// State is what a server left in its state folder: the counter and the
// server's own record of applied effects.
type State struct {
	Counter int64
	Effects []AppliedEffect // in the order applied
}

// An AppliedEffect is one effect the server applied: the counter value it
// produced and the SHA-256 (lowercase hex) of the request body.
type AppliedEffect struct {
	Value      int64
	BodySHA256 string
}

// ReadState reads the state a server of the named store left in dir; call
// it after every server on dir has exited. A folder without state reads as
// a zero counter and no effects. The effects are exactly the counter's
// (values 1 to Counter, in order): an effect a crash cut off before it
// became durable is not listed. Volatile state is DIR/counter and
// DIR/effects.log; durable state is the database DIR/state.db.
func ReadState(store, dir string) (State, error) {
	var (
		st  State
		err error
	)
	switch store {
	case StoreVolatile:
		var effects []counterfile.Effect
		st.Counter, effects, err = counterfile.ReadState(dir)
		for _, e := range effects {
			st.Effects = append(st.Effects, AppliedEffect(e))
		}
	case StoreDurable:
		var effects []durablestore.Effect
		st.Counter, effects, err = durablestore.ReadState(dir)
		for _, e := range effects {
			st.Effects = append(st.Effects, AppliedEffect(e))
		}
	default:
		return State{}, fmt.Errorf("read state: unknown store %q (want volatile or durable)", store)
	}
	if err != nil {
		return State{}, fmt.Errorf("read %s state: %w", store, err)
	}
	return st, nil
}

package serverproc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// readStateWithin bounds one read of a store's state.
const readStateWithin = 30 * time.Second

// ReadState reads what the servers of store kind left at p, once every one
// exited, with the effect server's -read-state mode: the runner links no
// store engine, and the server refuses bad state as it does at start.
func ReadState(ctx context.Context, path string, kind protocol.Store, p store.Place) (store.State, error) {
	args := []string{"-read-state", "json", "-store", string(kind)}
	if p.DSN != "" {
		args = append(args, "-dsn", p.DSN)
	} else {
		args = append(args, "-state", p.Dir)
	}
	ctx, cancel := context.WithTimeout(ctx, readStateWithin)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = childAttr(false)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return store.State{}, fmt.Errorf("read %s state: %w: %s", kind, err, strings.TrimSpace(stderr.String()))
	}
	var st store.State
	d := json.NewDecoder(bytes.NewReader(out))
	d.DisallowUnknownFields()
	if err := d.Decode(&st); err != nil {
		return store.State{}, fmt.Errorf("read %s state: %w", kind, err)
	}
	if int64(len(st.Effects)) != st.Counter {
		return store.State{}, fmt.Errorf("read %s state: counter %d, but %d effects journaled", kind, st.Counter, len(st.Effects))
	}
	return st, nil
}

// Command effectserver is the lab's side-effect server: POST /effect adds
// one to a durable counter, at most once per Idempotency-Key, and can be
// told to misbehave (drop a reply, stall, crash) for the crash-test lab.
//
// Usage:
//
//	effectserver -state DIR [flags]
//	effectserver -store postgres -dsn URL [flags]
//	effectserver -read-state json|counter -state DIR [-store NAME]
//
// It listens on loopback only, prints one line "READY 127.0.0.1:PORT" on
// standard output once it accepts connections, and logs one line per
// request on standard error. With -store volatile (the default) the counter
// lives in DIR/counter, the journal of applied effects in DIR/effects.log
// and the keys only in memory; with -store durable the counter, the keys
// and the journal live in the SQLite database DIR/state.db, where each
// effect commits in one transaction with its key, and several servers may
// share one DIR; with -store postgres they live in the PostgreSQL database
// -dsn names, which several servers (replicas) share. With -downstream
// URL the effect is a POST to another effect server (the ledger) instead,
// between two commits of the key's claim and result. SIGTERM or SIGINT
// shuts it down gracefully. -read-state prints what a store holds (the
// counter and the journal of applied effects) and exits without serving:
// how the runner reads a store after its servers exited. "effectserver -h" prints every flag with its
// default (from the command's FlagSet), the HTTP contract, the bounds on
// every input and the exit statuses; the list below is checked against it
// by a test.
//
// Lab clients must disable HTTP keep-alives: Go's http.Transport silently
// resends a request carrying an Idempotency-Key when a reused connection
// fails before the reply, which hides a dropped reply from the lab.
//
// Exit status:
//
//	0   clean shutdown on SIGTERM or SIGINT (requests still in flight
//	    at the end of the grace are cut), or -h
//	1   the server failed while running
//	2   usage error: a bad flag or argument, missing -state or -dsn, a
//	    non-loopback -addr, -faults with a non-loopback address, unknown
//	    -store, -unsafe-registry without -faults or unknown, or with
//	    -downstream or -key-ttl, -downstream not a loopback http URL of
//	    /effect, -forward-key, -service or -lease without -downstream, a
//	    number or duration out of range (-capacity, -max-body, -wait,
//	    -lease, -key-ttl)
//	3   refused to start on the state or address given: a state folder
//	    that is missing, not a folder or not writable, held by another
//	    server or holding the other store's files; a counter file or
//	    effects log that is malformed, not a regular file (a FIFO, a
//	    device, a symlink) or ends in more than one torn record; a
//	    database that cannot be opened, reached (the DSN is named, its
//	    password redacted) or is corrupt, foreign or disagrees with
//	    itself; more recorded keys than -capacity; an -addr that cannot
//	    be listened on (port in use)
//	23  a lab crash fault fired
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"idemlab/internal/effectserver"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run parses args, serves until SIGTERM or SIGINT, and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, err := effectserver.ParseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, effectserver.Help())
		return effectserver.ExitOK
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		err = effectserver.Run(ctx, cfg, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "effectserver: %v\n", err)
	}
	return effectserver.ExitStatus(err)
}

// Command effectserver is the lab's side-effect server: POST /effect adds
// one to a durable counter, at most once per Idempotency-Key, and can be
// told to misbehave (drop a reply, stall, crash) for the crash-test lab.
//
// Usage:
//
//	effectserver -state DIR [-addr 127.0.0.1:0] [-store volatile|durable]
//	effectserver -store postgres -dsn URL [-addr 127.0.0.1:0]
//	             [-capacity 64] [-max-body 4096] [-wait 5s] [-faults]
//	             [-unsafe-registry NAME] [-key-ttl D]
//	             [-downstream URL [-forward-key=true|false] [-service NAME] [-lease D]]
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
// shuts it down gracefully. Run
// "effectserver -h" for the flags and the HTTP contract.
//
// Lab clients must disable HTTP keep-alives: Go's http.Transport silently
// resends a request carrying an Idempotency-Key when a reused connection
// fails before the reply, which hides a dropped reply from the lab.
//
// Exit status:
//
//	0   clean shutdown on SIGTERM or SIGINT (and -h)
//	1   the server failed while running
//	2   usage error: bad flag, missing -state or -dsn, non-loopback -addr, -faults
//	    with a non-loopback address, unknown -store, -unsafe-registry
//	    without -faults or unknown, or with -downstream or -key-ttl,
//	    -downstream not a loopback http URL of /effect, unusable state folder,
//	    malformed counter file or effects log, database that cannot be
//	    opened, reached (named with its password redacted) or is corrupt,
//	    a state folder another server holds or holding the other store's
//	    files or a database that disagrees with itself, more recorded keys
//	    than -capacity, an -addr that cannot be listened on (port in use)
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
	"idemlab/internal/protocol"
)

const help = `usage: effectserver -state DIR [flags]
       effectserver -store postgres -dsn URL [flags]

effectserver serves POST /effect on loopback: each admitted request adds one
to a durable counter and replies 200 with the counter value after its
effect, header Idempotency-Replayed: true|false. Every applied effect is
also journaled with its value and the SHA-256 of its body. Prints
"READY 127.0.0.1:PORT" on stdout once it accepts connections; logs one line
per request on stderr.

Flags:
  -state DIR        state folder (required but with -store postgres; must exist)
  -dsn URL          the PostgreSQL database of -store postgres (only then)
  -addr HOST:PORT   listen address, loopback only: 127.0.0.0/8, ::1 or
                    localhost (default 127.0.0.1:0, any free port)
  -store NAME       volatile (default): counter in DIR/counter (fsync, then
                    atomic rename), journal DIR/effects.log, keys in memory
                    only (a restart forgets them);
                    durable: counter, keys and journal in the SQLite
                    database DIR/state.db, each effect committed in one
                    transaction with its key; keys survive restarts, and
                    servers sharing DIR apply each key once;
                    postgres: the same in the database -dsn names, shared by
                    replicas; a duplicate waits for an owner on another
                    replica up to -wait
  -capacity N       most idempotency keys held, in-flight ones included;
                    a new key beyond it gets 429, no eviction (default 64)
  -max-body N       largest request body in bytes; more gets 413 (default 4096)
  -wait D           how long a duplicate waits for an in-flight owner
                    before 409 (default 5s)
  -faults           honour the X-Lab-Fault header (loopback only)
  -unsafe-registry NAME
                    with -faults only: build a classic bug into the key
                    registry, to prove the lab's cases catch it (announced
                    on stderr): record-after-effect (no in-flight record,
                    concurrent duplicates all run), no-fingerprint (another
                    body replays instead of 422), evict-oldest (a full
                    registry forgets its oldest key instead of 429),
                    forget-on-lost-reply (a dropped reply drops the record),
                    record-before-effect (the record is completed with a
                    placeholder before the effect: a phantom success),
                    check-then-act (the claim is a check, a gap, then an
                    insert: concurrent duplicates both own the key)
  -key-ttl D        a recorded key expires D after it was recorded: a retry
                    after that is a new effect, and the key frees its place
                    (default 0: never); every store, both modes
  -downstream URL   the downstream mode: the effect is a POST to another
                    effect server, the ledger, at URL (http://HOST:PORT/effect,
                    loopback); the reply value is the ledger's. A keyed
                    request passes three recovery points, each its own
                    transaction: claim the key with a lease; call the
                    ledger; record its value as the key's result. A claim
                    whose owner died is taken over after the lease, and the
                    ledger is called again. Volatile keeps claims in memory
                    (a restart forgets them); durable and postgres in their
                    database (replicas and restarts see them)
  -forward-key=BOOL with -downstream: send the ledger the key "fw-" + the
                    first 40 hex digits of SHA-256(SERVICE ":" KEY), so a
                    retry the ledger already applied replays there (default
                    true); false sends no key (a retry after a takeover
                    applies again)
  -service NAME     scopes the forwarded key, so that two services cannot
                    collide at one ledger; the same on every replica
                    (default effectserver)
  -lease D          how long a claim holds its key (default 5s); until then
                    a duplicate gets 409 with Retry-After, after it any
                    replica takes the key over
  -h                print this help

Request headers:
  Idempotency-Key   optional; a token [A-Za-z0-9_-]{1,64}, bare or quoted
                    ("abc-1"); anything else gets 400
  X-Lab-Fault       with -faults only (else 400): drop-reply, slow,
                    delay=NNms (0..60000), crash-before-effect,
                    crash-after-effect, crash-after-record (exit 23);
                    with -downstream also crash-after-claim,
                    crash-after-downstream (exit 23) and
                    drop-downstream-reply (the ledger applies and drops its
                    reply). Faults acting at different points join with ","

Replies: 200 effect or replay; 400 bad header; 404 other path; 405 other
method (Allow: POST); 409 key still in progress after -wait; 413 body too
large; 422 key reused with another body; 429 registry full; 500 the effect
failed (the key is released, a retry can run); 503 the store's database
could not be reached (nothing recorded, a retry can run). With -downstream:
409 with Retry-After (seconds) while another request's claim holds the
key; 502 with Retry-After when the ledger call brought no value back (the
claim stays until its lease ends: the ledger may have applied).

Lab clients must disable HTTP keep-alives: Go's http.Transport silently
resends a request carrying an Idempotency-Key on a reused connection.

Exit status:
  0   clean shutdown on SIGTERM or SIGINT, or -h
  1   the server failed while running
  2   usage error: bad flag, missing -state or -dsn, non-loopback -addr, -faults
      with a non-loopback address, unknown -store, -unsafe-registry
      without -faults or unknown, or with -downstream or -key-ttl,
      -downstream not a loopback http URL of /effect, unusable state folder,
      malformed counter file or effects log, database that cannot be
      opened, reached (the DSN is named, its password redacted) or is
      corrupt, a state folder another server holds or holding the other
      store's files or a database that disagrees with itself, more
      recorded keys than -capacity, an -addr that cannot be listened on
      (port in use)
  23  a lab crash fault fired
`

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run parses args, serves until SIGTERM or SIGINT, and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("effectserver", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, help by -h
	cfg := effectserver.Config{Store: protocol.Volatile, ForwardKey: true}
	fs.StringVar(&cfg.StateDir, "state", "", "state folder")
	fs.StringVar(&cfg.DSN, "dsn", "", "database URL (-store postgres)")
	fs.StringVar(&cfg.Addr, "addr", protocol.DefaultAddr, "loopback listen address")
	fs.Func("store", "store", func(s string) (err error) { cfg.Store, err = protocol.ParseStore(s); return err })
	fs.IntVar(&cfg.Capacity, "capacity", protocol.DefaultCapacity, "most keys held")
	fs.Int64Var(&cfg.MaxBody, "max-body", protocol.DefaultMaxBody, "largest body in bytes")
	fs.DurationVar(&cfg.Wait, "wait", protocol.DefaultWait, "wait for an in-flight owner")
	fs.BoolVar(&cfg.Faults, "faults", false, "honour X-Lab-Fault")
	fs.Func("unsafe-registry", "deliberately broken registry (with -faults)", func(s string) (err error) {
		cfg.UnsafeRegistry, err = protocol.ParseFlaw(s)
		return err
	})
	fs.DurationVar(&cfg.KeyTTL, "key-ttl", 0, "recorded keys expire after D (0: never)")
	fs.StringVar(&cfg.Downstream, "downstream", "", "the ledger's effect URL")
	fs.BoolVar(&cfg.ForwardKey, "forward-key", true, "forward a derived key to the ledger")
	fs.StringVar(&cfg.Service, "service", effectserver.DefaultService, "scope of the forwarded key")
	fs.DurationVar(&cfg.Lease, "lease", effectserver.DefaultLease, "how long a claim holds its key")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			return 0
		}
		fmt.Fprintf(stderr, "effectserver: %v (see effectserver -h)\n", err)
		return 2
	}
	var orphan string
	fs.Visit(func(f *flag.Flag) {
		if cfg.Downstream == "" && (f.Name == "forward-key" || f.Name == "service" || f.Name == "lease") {
			orphan = f.Name
		}
	})
	if orphan != "" {
		fmt.Fprintf(stderr, "effectserver: -%s: only with -downstream (see effectserver -h)\n", orphan)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "effectserver: unexpected argument %q (see effectserver -h)\n", fs.Arg(0))
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := effectserver.Run(ctx, cfg, stdout, stderr)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "effectserver: %v\n", err)
	if _, usage := errors.AsType[*effectserver.StartError](err); usage {
		return 2
	}
	return 1
}

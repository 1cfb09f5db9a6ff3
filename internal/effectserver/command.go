package effectserver

// The effectserver command's flags, -h text and exit statuses;
// cmd/effectserver only parses, runs and maps Run's error to a status.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"idemlab/internal/effectserver/faultheader"
	"idemlab/internal/flaghelp"
	"idemlab/internal/protocol"
	"idemlab/internal/store/volatile"
)

// The command's exit statuses.
const (
	ExitOK      = 0 // clean shutdown on SIGTERM or SIGINT, or -h
	ExitFailed  = 1 // the server failed while running
	ExitUsage   = 2 // a *UsageError: the command line is wrong
	ExitRefused = 3 // a *RefusedError: the state or the address it names cannot be used
	ExitCrash   = protocol.CrashExitCode
)

// A UsageError is a command line the server cannot start with, whatever
// the state or the network hold (ExitUsage).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// A RefusedError is state or an address the server refuses to start on
// (ExitRefused): unlike a UsageError, a retry may succeed once the state
// or the port is freed or repaired.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// ExitStatus maps what Run or ParseArgs returned to the exit status.
func ExitStatus(err error) int {
	if _, ok := errors.AsType[*UsageError](err); ok {
		return ExitUsage
	}
	if _, ok := errors.AsType[*RefusedError](err); ok {
		return ExitRefused
	}
	if err != nil {
		return ExitFailed
	}
	return ExitOK
}

// newFlagSet returns the command's flags parsing into cfg, set to their
// defaults; each usage names its argument in backquotes.
func newFlagSet(cfg *Config) *flag.FlagSet {
	*cfg = Config{Store: protocol.Volatile, ForwardKey: true}
	fs := flag.NewFlagSet("effectserver", flag.ContinueOnError)
	fs.StringVar(&cfg.StateDir, "state", "",
		"the state folder `DIR` (required but with -store postgres; it must exist)")
	fs.StringVar(&cfg.DSN, "dsn", "",
		"the PostgreSQL database `URL` of -store postgres (only then). Every user of the machine sees it in ps: "+
			"write no password in it, give it by PGPASSWORD or a password file (passfile=FILE in URL, or PGPASSFILE; "+
			"the .pgpass format), as the runner does (errors show URL with its password masked)")
	fs.StringVar(&cfg.Addr, "addr", protocol.DefaultAddr,
		"listen on `HOST:PORT`, loopback only: 127.0.0.0/8, ::1 or localhost (port 0: any free port)")
	fs.Var(nameVar(&cfg.Store, protocol.ParseStore), "store",
		"the store `NAME`. volatile: counter in DIR/counter (fsync, then atomic rename), journal DIR/effects.log, "+
			"keys in memory only (a restart forgets them). durable: counter, keys and journal in the SQLite "+
			"database DIR/state.db, each effect committed in one transaction with its key; keys survive restarts, "+
			"and servers sharing DIR apply each key once (one writer at a time: see Limits). postgres: the same in "+
			"the database -dsn names, shared by replicas; a duplicate waits for an owner on another replica up to -wait")
	fs.IntVar(&cfg.Capacity, "capacity", protocol.DefaultCapacity,
		"hold at most `N` idempotency keys, in-flight ones included (at least 1); a new key beyond them gets 429, no eviction")
	fs.Int64Var(&cfg.MaxBody, "max-body", protocol.DefaultMaxBody,
		"accept request bodies of at most `N` bytes; a larger one gets 413")
	fs.DurationVar(&cfg.Wait, "wait", protocol.DefaultWait,
		"a duplicate waits up to `D` for an in-flight owner, then gets 409")
	fs.BoolVar(&cfg.Faults, "faults", false,
		"honour the X-Lab-Fault header (loopback only)")
	fs.Var(nameVar(&cfg.UnsafeRegistry, protocol.ParseFlaw), "unsafe-registry",
		"with -faults only: build the classic bug `NAME` into the key registry, to prove the lab's cases catch it "+
			"(announced on stderr): record-after-effect (no in-flight record, concurrent duplicates all run), "+
			"no-fingerprint (another body replays instead of 422), evict-oldest (a full registry forgets its oldest "+
			"key instead of 429), forget-on-lost-reply (a dropped reply drops the record), record-before-effect "+
			"(the record is completed with a placeholder before the effect: a phantom success), check-then-act "+
			"(the claim is a check, a gap, then an insert: concurrent duplicates both own the key)")
	fs.DurationVar(&cfg.KeyTTL, "key-ttl", 0,
		"a recorded key expires `D` after it was recorded (0: never): a retry after that is a new effect, "+
			"and the key frees its place; every store, both modes")
	fs.StringVar(&cfg.Downstream, "downstream", "",
		"the downstream mode: the effect is a POST to another effect server, the ledger, at `URL` "+
			"(http://HOST:PORT/effect, loopback); the reply value is the ledger's. A keyed request passes three "+
			"recovery points, each its own transaction: claim the key with a lease; call the ledger; record its "+
			"value as the key's result. A claim whose owner died is taken over after the lease, and the ledger is "+
			"called again. Volatile keeps claims in memory (a restart forgets them); durable and postgres in their "+
			"database (replicas and restarts see them)")
	fs.BoolVar(&cfg.ForwardKey, "forward-key", true,
		"with -downstream, `BOOL`: true sends the ledger the key \"fw-\" + the first 40 hex digits of "+
			"SHA-256(SERVICE \":\" KEY), so a retry the ledger already applied replays there; false sends no key "+
			"(a retry after a takeover applies again)")
	fs.StringVar(&cfg.Service, "service", DefaultService,
		"with -downstream: `NAME` scopes the forwarded key, so that two services cannot collide at one ledger; "+
			"the same on every replica")
	fs.StringVar(&cfg.ReadState, "read-state", "",
		"print what the store holds in -state (or -dsn) as `FORMAT` and exit without serving, after every server "+
			"on it exited: json (the counter and the journal of applied effects, each with its value and body SHA-256) "+
			"or counter (the counter alone, one integer); the store's refusals of foreign or corrupt state apply")
	fs.DurationVar(&cfg.Lease, "lease", DefaultLease,
		"with -downstream: a claim holds its key for `D`; until then a duplicate gets 409 with Retry-After, "+
			"after it any replica takes the key over")
	return fs
}

// downstreamOnly are the flags that mean something only with -downstream.
var downstreamOnly = []string{"forward-key", "service", "lease"}

// ParseArgs parses the command line into a Config. -h gives flag.ErrHelp
// (print Help); every other error is a *UsageError.
func ParseArgs(args []string) (Config, error) {
	var cfg Config
	fs := newFlagSet(&cfg)
	fs.SetOutput(io.Discard) // errors are returned, help is Help's
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, &UsageError{fmt.Errorf("%w (see effectserver -h)", err)}
	}
	var orphan string
	fs.Visit(func(f *flag.Flag) {
		if cfg.Downstream == "" && orphan == "" && slices.Contains(downstreamOnly, f.Name) {
			orphan = f.Name
		}
	})
	if orphan != "" {
		return Config{}, &UsageError{fmt.Errorf("-%s: only with -downstream (see effectserver -h)", orphan)}
	}
	if fs.NArg() > 0 {
		return Config{}, &UsageError{fmt.Errorf("unexpected argument %q (see effectserver -h)", fs.Arg(0))}
	}
	return cfg, nil
}

// nameFlag is a flag holding a typed name, parsed by its parse function.
type nameFlag[T ~string] struct {
	v     *T
	parse func(string) (T, error)
}

func nameVar[T ~string](v *T, parse func(string) (T, error)) nameFlag[T] {
	return nameFlag[T]{v, parse}
}

func (f nameFlag[T]) String() string {
	if f.v == nil {
		return ""
	}
	return string(*f.v)
}

func (f nameFlag[T]) Set(s string) (err error) { *f.v, err = f.parse(s); return err }

// Help returns the -h text.
func Help() string {
	var b strings.Builder
	b.WriteString(helpSynopsis)
	b.WriteString("\nFlags:\n")
	var cfg Config
	b.WriteString(flaghelp.Flags(newFlagSet(&cfg), nil, nil))
	b.WriteString(flaghelp.Item(flaghelp.Column, "-h", "print this help"))
	b.WriteString(helpContract)
	b.WriteString("\nBounds (each a constant of the server; what exceeding it gets):\n")
	for _, bd := range bounds() {
		b.WriteString(flaghelp.Item(flaghelp.Column, bd.what, bd.bound))
	}
	b.WriteString(helpLimits)
	fmt.Fprintf(&b, limitsConns, maxConns, requestReadTimeout, maxConns)
	b.WriteString("\nExit status:\n")
	for _, e := range exitStatuses {
		b.WriteString(flaghelp.Item(exitColumn, fmt.Sprint(e.code), e.text))
	}
	return b.String()
}

const helpSynopsis = `usage: effectserver -state DIR [flags]
       effectserver -store postgres -dsn URL [flags]
       effectserver -read-state json|counter -state DIR [-store NAME]

effectserver serves POST /effect on loopback: each admitted request adds one
to a durable counter and replies 200 with the counter value after its
effect, header Idempotency-Replayed: true|false. Every applied effect is
also journaled with its value and the SHA-256 of its body. Prints
"READY 127.0.0.1:PORT" on stdout once it accepts connections; logs one line
per request on stderr. SIGTERM or SIGINT shuts it down gracefully (see
Bounds: shutdown grace).
`

const helpContract = `
Request headers:
  Idempotency-Key   optional; a token [A-Za-z0-9_-]{1,64}, bare or quoted
                    ("abc-1"); anything else gets 400
  X-Lab-Fault       with -faults only (else 400): drop-reply, slow,
                    delay=NNms (0..60000), stall=NNms (0..60000: the effect
                    done, its result not recorded: inside the store's
                    transaction), crash-before-effect, crash-after-effect,
                    crash-after-record (exit 23); with -downstream also
                    crash-after-claim, crash-after-downstream (exit 23) and
                    drop-downstream-reply (the ledger applies and drops its
                    reply). Faults acting at different points join with ","

Replies: 200 effect or replay; 400 bad header; 404 other path; 405 other
method (Allow: POST); 409 key still in progress after -wait; 413 body too
large; 422 key reused with another body; 429 registry full; 431 request
line and headers too large; 500 the effect failed (the key is released, a
retry can run); 503 the store's database could not be reached (nothing
recorded, a retry can run). With -downstream: 409 with Retry-After
(seconds) while another request's claim holds the key; 502 with
Retry-After when the ledger call brought no value back (the claim stays
until its lease ends: the ledger may have applied).

Lab clients must disable HTTP keep-alives: Go's http.Transport silently
resends a request carrying an Idempotency-Key on a reused connection.
`

// The help's Limits section; limitsConns takes maxConns and
// requestReadTimeout.
const (
	helpLimits = `
Limits:
  A stall=NNms fires inside the store's write transaction, after the
  effect, and holds what that transaction holds for its length. Durable:
  SQLite's one write lock, so every other write waits behind it, of any
  key: in this server for the whole stall (measured: a request for another
  key sent 0.3 s into a 3 s stall took 2.72 s, into a 12 s stall 11.72 s),
  in another server sharing DIR up to SQLite's busy timeout of 10 s, then
  500 (measured: 10.06 s). Postgres: the counter's row, so every other
  effect waits, on every replica, up to the lock timeout of 10 s, then 503
  (measured: 2.68 s into a 3 s stall; 503 after 10.01 s into a 12 s stall).
  Volatile: nothing (0 s). The lab's cases need the stall inside the
  transaction (a waiter on another replica must see the crash roll it back).
`
	limitsConns = `
  A connection beyond the cap of %d waits for the connections ahead of it:
  a client stalling its request holds its slot up to the request read
  bound (%s), so behind N stallers a connection waits up to N/%d (rounded
  down) request read bounds (measured: 9.03 s behind 500 stallers); a
  request being handled (a delay or stall, a duplicate waiting for its
  owner) holds its slot as long as that takes.
`
)

var exitStatuses = []struct {
	code int
	text string
}{
	{ExitOK, "clean shutdown on SIGTERM or SIGINT (requests still in flight at the end of the grace are cut), or -h"},
	{ExitFailed, "the server failed while running"},
	{ExitUsage, "usage error: a bad flag or argument, missing -state or -dsn, a non-loopback " +
		"-addr, -faults with a non-loopback address, unknown -store, -unsafe-registry without -faults " +
		"or unknown, or with -downstream or -key-ttl, -downstream not a loopback http URL of /effect, " +
		"-forward-key, -service or -lease without -downstream, a number or duration out of range " +
		"(-capacity, -max-body, -wait, -lease, -key-ttl)"},
	{ExitRefused, "refused to start on the state or address given: a state folder that is missing, " +
		"not a folder or not writable, held by another server or holding the other store's files; a " +
		"counter file or effects log that is malformed, not a regular file (a FIFO, a device, a symlink) " +
		"or ends in more than one torn record; a database that cannot be opened, reached (the DSN is named, " +
		"its password redacted) or is corrupt, foreign or disagrees with itself; more recorded keys than " +
		"-capacity; an -addr that cannot be listened on (port in use)"},
	{ExitCrash, "a lab crash fault fired"},
}

// exitColumn is where the exit statuses' text starts in the help.
const exitColumn = 6

// A bound is one input bound the help lists, and what exceeding it gets.
type bound struct{ what, bound string }

// bounds lists the server's input bounds from the constants that set them.
func bounds() []bound {
	return []bound{
		{"request headers", fmt.Sprintf("%d bytes, request line and headers together (net/http reads "+
			"4096 more before it refuses); more gets 431, answered before any handler and not logged", maxHeaderBytes)},
		{"request body", "-max-body bytes; more gets 413"},
		{"Idempotency-Key", fmt.Sprintf("%d characters; more gets 400", protocol.MaxKeyLen)},
		{"delay, stall", fmt.Sprintf("%d ms each; more gets 400", protocol.MaxDelay.Milliseconds())},
		{"echoed value", fmt.Sprintf("a 400 for a bad X-Lab-Fault quotes at most %d bytes of it, then "+
			"\"...\"", faultheader.MaxEcho)},
		{"log fields", fmt.Sprintf("method, path, key and fault at most %d bytes each, err %d, then "+
			"\"...(N bytes)\"", maxLogField, maxLogErr)},
		{"volatile state", fmt.Sprintf("DIR/counter at most %d bytes; after the effects DIR/effects.log lists, "+
			"at most one record a crash left (whole, or torn: under %d bytes, the start of the next record), "+
			"which is cut at start with a log line saying what; anything else, and either file not a regular "+
			"file, is refused at start (exit 3)", volatile.MaxCounterBytes, volatile.MaxRecordLen)},
		{"request read", fmt.Sprintf("%s from its connection's accept, headers and body; a client "+
			"still sending then gets 400 (its headers had arrived) or its connection closed", requestReadTimeout)},
		{"connections", fmt.Sprintf("%d served at once; a connection beyond them waits in the kernel's "+
			"accept backlog, in arrival order, until one closes (see Limits)", maxConns)},
		{"shutdown grace", fmt.Sprintf("%s from SIGTERM or SIGINT for the requests in flight; then a "+
			"stall or delay still sleeping is cut (the request is not answered; a cut stall is rolled back "+
			"by durable and postgres, not by volatile, whose effect was durable before it; the key is not "+
			"recorded), every connection still open is closed, and the cut requests get %s more to end "+
			"before the store closes", shutdownGrace, cutWithin)},
	}
}

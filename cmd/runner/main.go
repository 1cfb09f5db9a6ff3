// Runner runs idemlab's case suite against real effectserver processes,
// writes the evidence folder, and has the audit program check it.
//
// It builds cmd/effectserver and cmd/audit with a pinned recipe into a cache
// keyed by their sources (or takes a prebuilt server with -server), starts a
// throwaway PostgreSQL for the postgres store when it is selected, runs every
// (case, store) pair in parallel on fresh servers (one per replica) and fresh
// state each, prints one line per finished run and a summary table, writes
// results.json, run.json, REPORT.md and manifest.json, then runs audit as a
// separate process and exits with its verdict. Run it from the root of the
// idemlab checkout.
//
// A plain run also runs both retry experiments (retries, jitter) and adds
// their files to the evidence; -case runs one case and no experiment,
// -experiment one experiment and no case.
//
// Usage:
//
//	runner [-out evidence] [-store volatile|durable|postgres|all] [-case NAME] [-server PATH] [-pg-dsn URL]
//	runner -experiment retries|jitter|chaos|none [-out DIR] [-seed N] [-intents 200]
//	runner -experiment chaos [-store NAME] [-duration 3s] [-clients 8] [-replicas 2]
//	       [-drop-percent 15] [-timeout-ms 30] [-attempts 6] [-workers 10] [-deadline-ms 0]
//	runner -unsafe-registry NAME [-out DIR] [-store ...] [-case NAME]
//
// Exit status:
//
//	0  the audit passed
//	1  the audit failed
//	2  usage: a bad flag, a malformed case file, an unknown case or store,
//	   an -out folder holding files the runner does not write
//	3  the lab itself broke: a build failed, a server never became ready,
//	   -store postgres without PostgreSQL installed, ...
//	4  interrupted (SIGINT or SIGTERM): it stopped sending, stopped every
//	   server and database it started, and wrote no evidence
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

	"idemlab/internal/chaos"
	"idemlab/internal/protocol"
	"idemlab/internal/retries"
	"idemlab/internal/runner"
)

const usage = `usage: runner [-out DIR] [-store volatile|durable|postgres|all] [-case NAME] [-server PATH] [-pg-dsn URL]
       runner -experiment retries|jitter|chaos|none [-out DIR] [-seed N] [-intents N]
       runner -experiment chaos [-store NAME] [-duration D] [-clients N] [-replicas N]
              [-drop-percent N] [-timeout-ms N] [-attempts N] [-workers N] [-deadline-ms N]
       runner -unsafe-registry NAME [-out DIR] [-store NAME] [-case NAME]

Runs the idemlab case suite against real effectserver processes, then the
experiments (retries, jitter, chaos), writes the evidence folder and audits it with the audit
program. Run it from the root of the idemlab checkout (it reads cases/ and
schema/ and builds ./cmd/...). The first build compiles SQLite (about a
minute); later runs reuse the binaries while their sources are unchanged.
The postgres store runs on a throwaway PostgreSQL the runner starts and
stops itself; without PostgreSQL a plain run skips that column and says so.

Flags:
  -out DIR          evidence folder to write (default "evidence"); it may
                    hold only files the runner writes
  -store NAME       store to run every case on: volatile, durable, postgres,
                    or all (default all; all skips postgres where PostgreSQL
                    is not installed)
  -case NAME        run only this case (a case file's name), no experiment
  -experiment NAME  run only this experiment, no case: retries (client designs
                    on a flaky network, counted from the server's journal),
                    jitter (the retry-storm model, drawn as jitter.svg) or
                    chaos (clients under seeded faults and kill -9 on every
                    selected store, judged from the recorded history);
                    none runs the cases and no experiment
  -seed N           the retries and chaos experiments' seed (default 1)
  -intents N        the retries experiment's intents per row (default 200)
  -drop-percent N   the retries experiment's chance, in %, that the client
                    drops an attempt before sending it (default 15)
  -timeout-ms N     its client timeout per attempt (default 30)
  -attempts N       its attempts per intent for the retrying clients (default 6)
  -workers N        its intents in flight at once per row (default 10)
  -deadline-ms N    its total deadline per intent, over all attempts and
                    waits; 0: none (default 0)
  -unsafe-registry NAME
                    a mutation run: the cases (no experiment) against servers
                    with a deliberately broken registry, record-after-effect,
                    no-fingerprint, evict-oldest, forget-on-lost-reply,
                    record-before-effect or check-then-act; the
                    audit must FAIL and name the case that caught the bug
  -server PATH      use this effectserver binary instead of building one
  -duration D       the chaos experiment's chaos phase per store (default 3s);
                    a soak is a longer one
  -clients N        the chaos experiment's clients (default 8)
  -replicas N       the chaos experiment's replicas per store (default 2)
  -pg-dsn URL       run the postgres store on this existing server (its user
                    must create databases: one per run, dropped after it)
                    instead of a throwaway cluster the runner starts

Exit status:
  0  the audit passed
  1  the audit failed
  2  usage: bad flag, malformed case file, unknown case, store,
     experiment or unsafe registry, bad -out
  3  the lab itself broke (build failed, server never became ready,
     -store postgres without PostgreSQL installed, ...)
  4  interrupted (SIGINT or SIGTERM): it stopped sending, stopped every
     server and database it started, and wrote no evidence
`

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, help by -h
	o := runner.Options{Root: ".", Stdout: stdout, Stderr: stderr}
	fs.StringVar(&o.Out, "out", "evidence", "evidence folder to write")
	o.Stores = protocol.Stores
	fs.Func("store", "volatile, durable, postgres or all", func(s string) (err error) {
		o.Stores, err = runner.ParseStores(s)
		o.PostgresAsked = s == string(protocol.Postgres)
		o.StoresGiven = true
		return err
	})
	fs.Func("target", "run the cases on this target: a shipped target's name or a folder with target.json (repeatable)", func(s string) error {
		if s == "" {
			return errors.New("want a target's name or folder")
		}
		o.Targets = append(o.Targets, s)
		return nil
	})
	fs.StringVar(&o.Case, "case", "", "run only this case")
	fs.StringVar(&o.ServerPath, "server", "", "prebuilt effectserver binary")
	fs.StringVar(&o.PostgresDSN, "pg-dsn", "", "existing PostgreSQL server for the postgres store")
	fs.DurationVar(&o.Chaos.Duration, "duration", chaos.Defaults.Duration, "chaos phase per store")
	fs.IntVar(&o.Chaos.Clients, "clients", chaos.Defaults.Clients, "chaos clients")
	fs.IntVar(&o.Chaos.Replicas, "replicas", chaos.Defaults.Replicas, "chaos replicas per store")
	fs.Func("experiment", "run only this experiment", func(s string) (err error) {
		o.Experiment, err = runner.ParseExperiment(s)
		return err
	})
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the retries experiment")
	fs.IntVar(&o.Intents, "intents", runner.DefaultIntents, "intents per row of the retries experiment")
	o.Retries = retries.Default
	fs.IntVar(&o.Retries.DropPercent, "drop-percent", retries.Default.DropPercent, "retries: % of attempts dropped before sending")
	fs.IntVar(&o.Retries.ClientTimeoutMS, "timeout-ms", retries.Default.ClientTimeoutMS, "retries: client timeout per attempt, ms")
	fs.IntVar(&o.Retries.MaxAttempts, "attempts", retries.Default.MaxAttempts, "retries: attempts per intent")
	fs.IntVar(&o.Retries.Workers, "workers", retries.Default.Workers, "retries: intents in flight per row")
	fs.IntVar(&o.Retries.TotalDeadlineMS, "deadline-ms", retries.Default.TotalDeadlineMS, "retries: total deadline per intent, ms (0: none)")
	fs.Func("unsafe-registry", "run the cases against this broken registry", func(s string) (err error) {
		o.Unsafe, err = protocol.ParseFlaw(s)
		return err
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "runner: %v (see runner -h)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "runner: unexpected argument %q (see runner -h)\n", fs.Arg(0))
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := runner.Run(ctx, o)
	var usageErr *runner.UsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, runner.ErrInterrupted):
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 4
	case errors.Is(err, runner.ErrAuditFailed):
		fmt.Fprintln(stderr, "runner: the audit failed")
		return 1
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "runner: the lab broke: %v\n", err)
		return 3
	}
}

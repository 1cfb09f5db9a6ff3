// Runner runs idemlab's case suite against real effectserver processes and
// the shipped targets, then the experiments (retries, jitter, chaos), writes
// the evidence folder, and has the audit program check it, exiting with its
// verdict.
//
// Run `runner -h` for its usage, flags and exit statuses.
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

	"idemlab/internal/runner"
)

const usageHead = `usage: runner [-out DIR] [-store NAME] [-case NAME] [-server PATH] [-pg-dsn URL]
       runner -target NAME|DIR [-target ...] [-case NAME] [-out DIR] [-junit FILE] [-strict]
       runner -shard K/N [-target NAME|DIR ...] [-store NAME] [-case NAME] [-trials N] [-out DIR]
       runner -experiment retries [-seed N] [-intents N] [-drop-percent N]
              [-timeout-ms N] [-attempts N] [-workers N] [-deadline-ms N]
       runner -experiment chaos [-store NAME] [-target NAME|DIR] [-seed N] [-duration D]
              [-clients N] [-replicas N] [-chaos-trials N]
       runner -experiment jitter|none
       runner -unsafe-registry NAME [-store NAME] [-case NAME]

Runs the idemlab case suite against real effectserver processes, then the
experiments (retries, jitter, chaos), writes the evidence folder and audits
it with the audit program. Run it from the root of the idemlab checkout (it
reads cases/ and schema/ and builds ./cmd/...). The first build compiles
SQLite (about a minute); later runs reuse the binaries while their sources
are unchanged. The postgres store runs on a throwaway PostgreSQL the runner
starts and stops itself; without PostgreSQL a plain run skips that column
and says so. Every flag and case file field has a stated bound
(docs/bounds.md); a value outside it is a usage error.

`

const exitStatus = `
Exit status:
  0  the audit passed
  1  the audit failed, or a run without -out differs from the committed
     evidence in a deterministic file
  2  usage: a bad flag or a value outside its bound, a malformed case file,
     an unknown case, store, experiment or unsafe registry, a bad -out
  3  the lab itself broke (a build failed, a server of the lab's own never
     became ready, -store postgres without PostgreSQL installed, ...)
  4  interrupted (SIGINT or SIGTERM) before the evidence was written: it
     stopped sending, stopped every server and database it started, and
     wrote no evidence
  5  interrupted (SIGINT or SIGTERM) while the audit ran: the evidence
     folder was written but not audited (run audit on it, or run again)
  6  with -target: the audit passed, and a judged run on a target shows a
     safety violation (with -strict, a limitation too); the runner lists
     them (docs/ci.md)
  7  a target could not be set up, started or reached (its setup failed,
     it never got ready, it exited at once, its folder holds what the lab
     cannot read, ...), or a target named with -target could not run here
     (a program it requires is missing: it is skipped, the evidence of the
     rest written and audited): the target's problem, not the lab's
  When several apply: an interrupt (4, 5) first, then usage (2), then a
  target's problem (7), then the audit's verdict (1, 6), then the lab (3).
`

// usage is the help: the synopsis, the flags rendered from fs, the exits.
func usage(fs *flag.FlagSet) string { return usageHead + flagsHelp(fs) + exitStatus }

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if err := checkArgs(args); err != nil {
		fmt.Fprintf(stderr, "runner: %v (see runner -h)\n", err)
		return 2
	}
	o := runner.Options{Root: ".", Stdout: stdout, Stderr: stderr}
	fs := newFlags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage(fs))
			return 0
		}
		fmt.Fprintf(stderr, "runner: %v (see runner -h)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "runner: unexpected argument %q (see runner -h)\n", fs.Arg(0))
		return 2
	}
	if err := checkBounds(fs); err != nil {
		fmt.Fprintf(stderr, "runner: %v (see docs/bounds.md)\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := runner.Run(ctx, o)
	var usageErr *runner.UsageError
	var targetErr *runner.TargetError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, runner.ErrAuditInterrupted):
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 5
	case errors.Is(err, runner.ErrInterrupted):
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 4
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 2
	case errors.As(err, &targetErr):
		fmt.Fprintf(stderr, "runner: %v\nrunner: the target's problem, not the lab's: target %s could not be set up, started or run here (docs/targets.md)\n", err, targetErr.Target)
		return 7
	case errors.Is(err, runner.ErrViolations):
		fmt.Fprintf(stderr, "runner: the audit passed, but %v (listed above)\n", err)
		return 6
	case errors.Is(err, runner.ErrAuditFailed):
		fmt.Fprintln(stderr, "runner: the audit failed")
		return 1
	case errors.Is(err, runner.ErrDiffers):
		fmt.Fprintf(stderr, "runner: the run passed its audit, but %v (listed above)\n", err)
		return 1
	default:
		fmt.Fprintf(stderr, "runner: the lab broke: %v\n", err)
		return 3
	}
}

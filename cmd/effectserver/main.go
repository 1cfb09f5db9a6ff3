// Command effectserver is the lab's side-effect server: POST /effect adds
// one to a durable counter, at most once per Idempotency-Key, and can be
// told to misbehave (drop a reply, stall, crash) for the crash-test lab.
//
// Run `effectserver -h` for its usage, flags and exit statuses, and for the
// HTTP contract and the bounds it keeps.
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

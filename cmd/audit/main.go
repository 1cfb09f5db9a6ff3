// Audit re-checks idemlab evidence, trusting nothing but bytes, the case
// files in cases/, the schemas in schema/, the checkout's sources and its
// git history. It shares no code with the runner that wrote the evidence.
//
// Nothing in the evidence is believed because its hash matches: the audit
// re-derives jitter.json, jitter.svg, REPORT.md and TARGETS.md and
// compares them byte for byte, and checks results.json against the case
// files and the server's reply texts, run.json against results.json,
// targets.json against the case files and the target folders (each run's
// verdict judged again with the audit's own judge), retries.json against
// the design's parameters and claims, and every manifest field
// (protocol constants, source commit and tree, dirtiness, mutation runs,
// the server's build). It reads only regular files inside the evidence
// folder and the checkout's source folders, each under a size cap, and
// refuses JSON with duplicate names, invalid UTF-8 or trailing data. It
// reports every failure, not only the first. See package
// idemlab/internal/audit for the full list.
//
// With -compare it says whether two evidence folders hold byte-identical
// deterministic files (results.json; jitter.json, jitter.svg and REPORT.md
// where present) and, where not, which runs or strategies differ.
//
// Usage:
//
//	audit [-json] [-root DIR] [-case NAME] [-store NAME] [-allow-dirty] [-allow-mutation] [-rebuild] [EVIDENCE_DIR]
//	audit [-root DIR] -compare DIR_A DIR_B
//
// EVIDENCE_DIR defaults to evidence, -root (the checkout holding cases/,
// schema/ and the source files) to the current folder.
//
// Exit status: 0 the audit passed (or the compared files are identical);
// 1 a check failed (or the files differ); 2 usage error, or an input
// cannot be read (missing evidence folder, unreadable or unparseable
// manifest, bad case file, not a checkout).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"idemlab/internal/audit"
)

const usage = `usage: audit [-json] [-root DIR] [-case NAME] [-store NAME] [-allow-dirty] [-allow-mutation] [-rebuild] [EVIDENCE_DIR]
       audit [-root DIR] -compare DIR_A DIR_B
`

// help is the -h text; %s is where the flags go (flagsHelp).
const help = usage + `
Audit re-checks the evidence folder EVIDENCE_DIR (default evidence) against
the checkout at -root, trusting no hash for what a file says: schemas (after
a strict read: no duplicate JSON names, valid UTF-8, size caps, no
symlinks); the SHA-256 of every evidence and source file, and nothing
outside the sources that changes the build; every manifest field (protocol
constants against internal/protocol and the runs, source_commit against git
history, source_dirty, unsafe_registry, server_build); the runs the
selection lists; every expectation in cases/ and every call against the
case's steps and the server's reply texts; run.json against results.json;
REPORT.md, jitter.json and jitter.svg re-derived byte for byte; retries.json
against the design's parameters and claims. It prints "PASS: ..." with
counts (and what a partial selection leaves out), or "FAIL: N checks" and
one line per failure.

%s
Exit status:
  0  the audit passed; with -compare, the files are identical
  1  a check failed; with -compare, the files differ
  2  usage error, or an input cannot be read (missing evidence folder,
     unreadable or unparseable manifest, bad case file, not a checkout)
`

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(audit.MemoryLimit) // the caps bound what the audit keeps; this, its garbage
	}
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		asJSON        = fs.Bool("json", false, "print the verdict as one JSON object")
		root          = fs.String("root", ".", "the checkout `DIR` holding cases/, schema/ and the sources")
		only          = fs.String("case", "", "check only the runs of case `NAME` in depth")
		store         = fs.String("store", "", "check only the runs on store `NAME` in depth")
		allowDirty    = fs.Bool("allow-dirty", false, "accept evidence from uncommitted sources (source_dirty)")
		allowMutation = fs.Bool("allow-mutation", false, "accept a mutation run (unsafe_registry) as one")
		rebuild       = fs.Bool("rebuild", false, "rebuild cmd/effectserver with the recorded, pinned flags and compare its SHA-256 with server_sha256")
		compare       = fs.Bool("compare", false, "compare the deterministic files of DIR_A and DIR_B")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, help, flagsHelp(fs))
			return 0
		}
		return usageError(stderr, err.Error())
	}

	if *compare {
		if *asJSON || *only != "" || *store != "" || *allowDirty || *allowMutation || *rebuild {
			return usageError(stderr, "-compare takes no other flag but -root")
		}
		if fs.NArg() != 2 {
			return usageError(stderr, "-compare needs two evidence folders")
		}
		c, err := audit.Compare(fs.Arg(0), fs.Arg(1))
		if err != nil {
			return cannotRead(stderr, err)
		}
		if err := c.WriteText(stdout); err != nil {
			return cannotRead(stderr, err)
		}
		if !c.Identical {
			return 1
		}
		return 0
	}

	if fs.NArg() > 1 {
		return usageError(stderr, "at most one evidence folder")
	}
	dir := "evidence"
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	r, err := audit.Audit(audit.Options{Root: *root, Evidence: dir, Case: *only, Store: *store,
		AllowDirty: *allowDirty, AllowMutation: *allowMutation, Rebuild: *rebuild})
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) && !isCheckout(*root) {
			fmt.Fprintf(stderr, "audit: %v (run audit from the idemlab checkout, or pass -root DIR)\n", err)
			return 2
		}
		return cannotRead(stderr, err)
	}
	write := r.WriteText
	if *asJSON {
		write = r.WriteJSON
	}
	if err := write(stdout); err != nil {
		return cannotRead(stderr, err)
	}
	if !r.Pass {
		return 1
	}
	return 0
}

// isCheckout reports whether root holds the folders an audit reads.
func isCheckout(root string) bool {
	for _, d := range []string{"schema", "cases"} {
		if fi, err := os.Lstat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// usageError prints one line, the convention of every idemlab command.
func usageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "audit: %s (see audit -h)\n", msg)
	return 2
}

// cannotRead prints each line of err as "audit: LINE" and returns 2.
func cannotRead(stderr io.Writer, err error) int {
	for _, l := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "audit: %s\n", l)
	}
	return 2
}

// flagsHelp lists fs's flags in name order (the FlagSet's), each with
// its argument, text and default, so the help cannot drift from the
// flags.
func flagsHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("Flags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		if arg == "string" {
			arg = "VALUE"
		}
		if f.DefValue != "" && f.DefValue != "false" {
			text += " (default " + f.DefValue + ")"
		}
		head := "  -" + f.Name
		if arg != "" {
			head += " " + arg
		}
		line := fmt.Sprintf("%-19s", head)
		fresh := true
		for _, w := range strings.Fields(text) {
			if !fresh && len(line)+1+len(w) > 78 {
				b.WriteString(strings.TrimRight(line, " ") + "\n")
				line, fresh = strings.Repeat(" ", 19), true
			}
			if !fresh {
				line += " "
			}
			line += w
			fresh = false
		}
		b.WriteString(line + "\n")
	})
	return b.String()
}

// Audit re-checks idemlab evidence, trusting nothing but bytes, the case
// files in cases/ and the schemas in schema/. It shares no code with the
// runner that wrote the evidence.
//
// It checks, and reports every failure (not only the first):
//
//   - manifest.json, results.json and run.json against their schemas;
//   - every file listed in manifest.files exists with its SHA-256, and no
//     other file sits in the evidence folder;
//   - every source listed in manifest.sources matches the checkout (CRLF
//     folded to LF), and no source file of the checkout is unlisted;
//   - results.json holds exactly one run per (case, store), in case-file
//     order then store order, consistent with manifest.selection;
//   - every expectation of every case file: counter, exit codes, the
//     number of calls and each expected field of each call;
//   - the experiments, when the manifest lists them: retries.json against
//     its schema and the design's promises per row (never-retry duplicates
//     nothing, retry-no-key loses nothing, retry-same-key neither loses nor
//     duplicates on the sound registry and duplicates on
//     record-after-effect, every row's counts add up to its intents);
//     jitter.json against its schema and against the audit's own
//     recomputation of the jitter model (every peak, total and bucket).
//
// With -compare it says whether two evidence folders hold byte-identical
// deterministic files (results.json; jitter.json and jitter.svg where
// present) and, where not, which runs or strategies differ.
//
// Usage:
//
//	audit [-json] [-root DIR] [-case NAME] [-store NAME] [EVIDENCE_DIR]
//	audit [-root DIR] -compare DIR_A DIR_B
//
// EVIDENCE_DIR defaults to evidence, -root (the checkout holding cases/,
// schema/ and the source files) to the current folder.
//
// Exit status: 0 the audit passed (or the compared files are identical);
// 1 a check failed (or the files differ); 2 usage error, or an input
// cannot be read (missing evidence folder, unreadable or unparseable
// manifest, bad case file).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	"idemlab/internal/audit"
)

const usage = `usage: audit [-json] [-root DIR] [-case NAME] [-store NAME] [EVIDENCE_DIR]
       audit [-root DIR] -compare DIR_A DIR_B
`

const help = usage + `
Audit re-checks the evidence folder EVIDENCE_DIR (default evidence) against
the checkout at -root: schemas of manifest.json, results.json and run.json;
the SHA-256 of every evidence file and of every source file; the set and
order of (case, store) runs; every expectation in cases/; and, when the
manifest lists them, the experiments: retries.json against the design's
promises per row, jitter.json against the audit's own run of the jitter
model. It prints "PASS: ..." with counts, or "FAIL: N checks" and one line
per failure.

Flags:
  -json         print the verdict as one JSON object
  -root DIR     the checkout holding cases/, schema/ and the sources (default .)
  -case NAME    require only the runs of case NAME
  -store NAME   require only the runs on store NAME
  -compare      compare the deterministic files of DIR_A and DIR_B

Exit status:
  0  the audit passed; with -compare, the files are identical
  1  a check failed; with -compare, the files differ
  2  usage error, or an input cannot be read (missing evidence folder,
     unreadable or unparseable manifest, bad case file)
`

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		asJSON        = fs.Bool("json", false, "")
		root          = fs.String("root", ".", "")
		only          = fs.String("case", "", "")
		store         = fs.String("store", "", "")
		compare       = fs.Bool("compare", false, "")
		allowDirty    = fs.Bool("allow-dirty", false, "")
		allowMutation = fs.Bool("allow-mutation", false, "")
		rebuild       = fs.Bool("rebuild", false, "")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
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

// Audit is idemlab's one judge: it re-checks the evidence the runner
// observed, trusting nothing but bytes, the case files in cases/, the
// schemas in schema/, the checkout's sources and its git history, derives
// every verdict and renders every human-readable file (written with
// -write, as the runner has it do after a run; compared byte for byte
// without); with -reproduce it runs the lab again and checks the
// evidence's claims on fresh observations; with -compare it compares two
// evidence folders. It shares no code with the lab that wrote the evidence:
// it imports only package idemlab/internal/audit, which lists every check,
// and internal/flaghelp, which lays out its -h text and holds no lab logic
// (deps_test.go).
//
// Run `audit -h` for its usage, flags and exit statuses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"idemlab/internal/audit"
	"idemlab/internal/flaghelp"
)

const usage = `usage: audit [-json] [-root DIR] [-case NAME] [-store NAME] [-allow-dirty] [-allow-mutation] [-rebuild] [-verify-key PUBFILE] [-gate] [-strict] [-junit FILE] [EVIDENCE_DIR]
       audit -write [-sign KEYFILE] [-json] [-root DIR] [-case NAME] [-store NAME] [-allow-dirty] [-allow-mutation] [-gate] [-strict] [-junit FILE] [EVIDENCE_DIR]
       audit -reproduce [-runs N] [-from DIR,...] [-json] [-root DIR] [-allow-dirty] [-allow-mutation] [-verify-key PUBFILE] [EVIDENCE_DIR]
       audit -merge -out DIR [-sign KEYFILE] [-json] [-root DIR] [-allow-dirty] [-allow-mutation] [-gate] [-strict] [-junit FILE] SLICE_DIR...
       audit [-root DIR] -compare DIR_A DIR_B
`

// help is the -h text; %s is where the flags go (flaghelp.Flags).
const help = usage + `
Audit is the lab's one judge. It re-checks the observations in the evidence
folder EVIDENCE_DIR (default evidence) against the checkout at -root,
trusting no hash for what a file says: schemas (after a strict read: no
duplicate JSON names, valid UTF-8, size caps, no symlinks); the SHA-256 of
every evidence and source file, and nothing outside the sources that
changes the build; every manifest field (protocol constants against
internal/protocol and the runs, source_commit against git history,
source_dirty, unsafe_registry, server_build); the runs the selection lists;
every call against the case's steps and the server's reply texts; run.json
against results.json; jitter.json against its own run of the model; the
experiments' parameters and seeds pinned to the design's unless
manifest.flags records the knob; retries.json against its parameters and
the design's claims; the chaos schedule regenerated from the seed and each
history checked for consistency. Then it judges: every run on a store
against its case's expectation, every run on a target (safety apart from
conformance), every chaos history by its checker. What it derives -
REPORT.md, TARGETS.md, MATRIX.md, matrix.svg, verdicts.json, the chaos timelines, jitter.svg and
the in-toto statement - it writes into EVIDENCE_DIR with -write (the runner
runs audit -write after every run); without -write each must already be
there, byte for byte. It prints "PASS: ..." with counts (and what a partial
selection leaves out), then what it re-derived, what it checked for
consistency only (counts no audit can recompute from bytes) and what it did
not check; or "FAIL: N checks" and one line per failure.

-reproduce re-observes what bytes cannot prove: it audits EVIDENCE_DIR,
builds ./cmd/runner from -root with the pinned recipe, and runs it again
with the recorded selection, seed and knobs into a temporary folder: run 1
the whole selection, whose deterministic files must equal the recorded ones
byte for byte; runs 2..N only its non-deterministic experiments (retries,
chaos). It prints, on each re-observation, whether every claim held again,
and each recorded count beside the re-observed ones, flagging one far from
them: outside [min/4 - 5, 4*max + 5] of the re-runs. On targets it sets
each case's rates over its trials beside run 1's, flagging one whose Wilson
95 %% interval does not overlap the re-run's, and holds what a target did
under chaos to the re-runs. Each re-run is audited again too. Run 1 costs
what the recorded run cost: on the committed evidence, 10 trials of each
case on each target (docs/evidence-and-audit.md gives the figure).

-merge joins the slices of one run (runner -shard K/N, each SLICE_DIR one
slice, maybe made on another machine) into the folder -out, new or empty,
as the whole run would have written it, then audits it with -write like a
whole run. Each slice must pass its own audit first; slices that overlap,
leave a slice out, or differ in anything but their cells (sources, commit,
selection, seed, knobs, machine, a target's folder or libraries) are
refused before anything is written. A slice audited alone is checked in
depth, cell by cell; its verdicts and reports are derived once merged.

-gate makes the verdicts a CI gate (docs/ci.md): once the audit passes, it
lists every judged run on a target that shows a safety violation (a case, or
a chaos run breaking a rule its claims promise) and exits 6 if there is one;
with -strict a limitation (a finding the target's claims excuse) fails it
too. -junit writes the verdicts as a JUnit XML report to FILE once the audit
passes (strict as -strict).

%s
Exit status:
  0  the audit passed; with -reproduce, it reproduced; with -compare, the
     files are identical
  1  a check failed; with -reproduce, the recorded evidence fails its audit,
     a deterministic file differs, a claim did not hold again, a recorded
     count is far from the re-runs, a rate on a target is implausible
     beside the re-run's, or a re-run fails its own audit; with
     -compare, the files differ
  2  usage error, or an input cannot be read (missing evidence folder,
     unreadable or unparseable manifest, bad case file, not a checkout, an
     unreadable -verify-key); with -merge, slices that cannot be merged
     (overlapping, one missing, not of one run, one failing its own audit)
     or an -out folder that is not new or empty; -gate or -junit on a
     slice
  3  with -reproduce: the lab could not be run as recorded (the runner did
     not build or broke, the selection is not one runner invocation, or the
     re-run selected other than the recorded)
  6  the audit passed, but with -gate a judged run on a target shows a
     safety violation (with -strict, a limitation too)
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
		verifyKey     = fs.String("verify-key", "", "require the statement signed (runner -sign) by the ed25519 public key in `PUBFILE` (an OpenSSH .pub line or a PEM PUBLIC KEY)")
		write         = fs.Bool("write", false, "write what the audit derives (REPORT.md, TARGETS.md, MATRIX.md, matrix.svg, verdicts.json, the timelines, jitter.svg, the statement) into EVIDENCE_DIR instead of comparing it")
		sign          = fs.String("sign", "", "with -write, also sign the statement as a DSSE envelope with the ed25519 private key in `KEYFILE` (OpenSSH without a passphrase, or PKCS #8 PEM)")
		reproduce     = fs.Bool("reproduce", false, "run the lab again as the evidence records and check that its claims hold on fresh observations")
		runs          = fs.Int("runs", 3, fmt.Sprintf("with -reproduce, observations of the non-deterministic experiments, `N` in 1..%d", audit.MaxRuns))
		from          = fs.String("from", "", "with -reproduce, judge these re-run folders instead of running the lab: `DIR,...`, the first a whole run of the recorded selection, the others runs of its non-deterministic experiments")
		gate          = fs.Bool("gate", false, "exit 6 when the audit passes but a judged run on a target shows a safety violation")
		strict        = fs.Bool("strict", false, "with -gate or -junit, a limitation fails too")
		junitFile     = fs.String("junit", "", "once the audit passes, write its verdicts as a JUnit XML report to `FILE`")
		merge         = fs.Bool("merge", false, "join the slices SLICE_DIR... of one run (runner -shard) into -out and audit the whole")
		out           = fs.String("out", "", "with -merge, the folder `DIR` to write the whole run into: new, or empty")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, help, "Flags:\n"+flaghelp.Flags(fs, nil, nil))
			return 0
		}
		return usageError(stderr, err.Error())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if *compare {
		return runCompare(given, fs.Args(), stdout, stderr)
	}
	gateOpts := gateOptions{gate: *gate, strict: *strict, junit: *junitFile, asJSON: *asJSON}
	switch {
	case *merge && (*out == "" || fs.NArg() == 0):
		return usageError(stderr, "-merge needs -out DIR and the slices' folders")
	case *merge && (*write || *reproduce || *rebuild || *verifyKey != "" || *only != "" || *store != "" || given["runs"] || given["from"]):
		return usageError(stderr, "-merge writes and audits the whole run: no -write, -reproduce, -rebuild, -verify-key, -case, -store, -runs or -from")
	case *merge:
		r, err := audit.Merge(audit.MergeOptions{Root: *root, Out: *out, Slices: fs.Args(), AllowDirty: *allowDirty, AllowMutation: *allowMutation, SignKey: *sign})
		if err != nil {
			return auditError(stderr, *root, err)
		}
		if code := writeVerdict(r.WriteText, r.WriteJSON, r.Pass, *asJSON, stdout, stderr); code != 0 {
			return code
		}
		return judgeGate(r, gateOpts, stdout, stderr)
	case given["out"]:
		return usageError(stderr, "-out goes with -merge")
	}
	if *strict && !*gate && *junitFile == "" {
		return usageError(stderr, "-strict goes with -gate or -junit")
	}
	if fs.NArg() > 1 {
		return usageError(stderr, "at most one evidence folder")
	}
	dir := "evidence"
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	switch {
	case *sign != "" && !*write && !*merge:
		return usageError(stderr, "-sign goes with -write: it signs the statement the audit writes")
	case *write && (*reproduce || *rebuild || *verifyKey != ""):
		return usageError(stderr, "-write writes what the audit derives: no -reproduce, -rebuild or -verify-key (audit the folder again for those)")
	case *reproduce && (*only != "" || *store != "" || *rebuild):
		return usageError(stderr, "-reproduce re-runs the whole recorded selection: no -case, -store or -rebuild (the re-run builds the server from the checkout itself)")
	case *reproduce && (*gate || *junitFile != ""):
		return usageError(stderr, "-gate and -junit judge one evidence folder: not with -reproduce")
	case *reproduce && (*runs < 1 || *runs > audit.MaxRuns):
		return usageError(stderr, fmt.Sprintf("-runs %d: want 1..%d", *runs, audit.MaxRuns))
	case *reproduce:
		return runReproduce(audit.ReproduceOptions{Root: *root, Evidence: dir, Runs: *runs, AllowDirty: *allowDirty,
			AllowMutation: *allowMutation, VerifyKey: *verifyKey, From: splitList(*from), Progress: stderr}, *asJSON, stdout, stderr)
	case given["runs"] || given["from"]:
		return usageError(stderr, "-runs and -from go with -reproduce")
	}
	r, err := audit.Audit(audit.Options{Root: *root, Evidence: dir, Case: *only, Store: *store,
		AllowDirty: *allowDirty, AllowMutation: *allowMutation, Rebuild: *rebuild, VerifyKey: *verifyKey, Write: *write, SignKey: *sign})
	if err != nil {
		return auditError(stderr, *root, err)
	}
	if code := writeVerdict(r.WriteText, r.WriteJSON, r.Pass, *asJSON, stdout, stderr); code != 0 {
		return code
	}
	if r.Shard != "" && (*gate || *junitFile != "") {
		return usageError(stderr, fmt.Sprintf("-gate and -junit judge a whole run: %s is slice %s of one, judged once merged (audit -merge -out DIR SLICE_DIR...)", dir, r.Shard))
	}
	return judgeGate(r, gateOpts, stdout, stderr)
}

// gateOptions are what a CI gate asks of a passing audit.
type gateOptions struct {
	gate, strict, asJSON bool
	junit                string
}

// judgeGate writes the JUnit report and applies the gate to a passing
// audit's verdicts; it returns 6 when the gate fails, 2 when the report
// cannot be written.
func judgeGate(r *audit.Report, o gateOptions, stdout, stderr io.Writer) int {
	if o.junit != "" {
		data, err := r.JUnit(o.strict)
		if err == nil {
			err = os.WriteFile(o.junit, data, 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "audit: -junit %s: %v\n", o.junit, err)
			return 2
		}
	}
	if !o.gate {
		return 0
	}
	g := r.Gate(o.strict)
	if !g.Failed() {
		return 0
	}
	out := stdout
	if o.asJSON {
		out = stderr // stdout holds the one JSON object
	}
	fmt.Fprintf(out, "GATE: failed by %d judged run(s) on targets:\n", len(g.Failures))
	for _, f := range g.Failures {
		fmt.Fprintf(out, "  %s\n", f)
	}
	return 6
}

// runCompare runs audit -compare DIR_A DIR_B and returns its exit status.
func runCompare(given map[string]bool, args []string, stdout, stderr io.Writer) int {
	for name := range given {
		if name != "compare" && name != "root" {
			return usageError(stderr, "-compare takes no other flag but -root")
		}
	}
	if len(args) != 2 {
		return usageError(stderr, "-compare needs two evidence folders")
	}
	c, err := audit.Compare(args[0], args[1])
	if err == nil {
		err = c.WriteText(stdout)
	}
	switch {
	case err != nil:
		return cannotRead(stderr, err)
	case !c.Identical:
		return 1
	}
	return 0
}

// auditError prints an error that stopped the audit and returns 2.
func auditError(stderr io.Writer, root string, err error) int {
	if errors.Is(err, iofs.ErrNotExist) && !isCheckout(root) {
		fmt.Fprintf(stderr, "audit: %v (run audit from the idemlab checkout, or pass -root DIR)\n", err)
		return 2
	}
	return cannotRead(stderr, err)
}

// runReproduce runs audit -reproduce and returns its exit status.
func runReproduce(o audit.ReproduceOptions, asJSON bool, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := audit.Reproduce(ctx, o)
	switch {
	case errors.Is(err, audit.ErrCannotReproduce):
		cannotRead(stderr, err)
		return 3
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(stderr, "audit: interrupted: %v\n", err)
		return 3
	case err != nil:
		return auditError(stderr, o.Root, err)
	}
	return writeVerdict(r.WriteText, r.WriteJSON, r.Pass, asJSON, stdout, stderr)
}

// writeVerdict writes a report, as text or JSON, and returns its exit status.
func writeVerdict(writeText, writeJSON func(io.Writer) error, pass, asJSON bool, stdout, stderr io.Writer) int {
	write := writeText
	if asJSON {
		write = writeJSON
	}
	if err := write(stdout); err != nil {
		return cannotRead(stderr, err)
	}
	if !pass {
		return 1
	}
	return 0
}

// splitList splits a comma-separated list; "" is nil.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
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

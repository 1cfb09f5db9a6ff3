// Package audit is idemlab's one judge. It re-checks an evidence folder
// against the checkout, trusting nothing but bytes: the case files in
// cases/, the schemas in schema/, the target folders in targets/, the
// checkout's sources and its git history. It derives every verdict and
// renders every file a person reads (REPORT.md, TARGETS.md, verdicts.json,
// the chaos timelines, jitter.svg, the in-toto statement): Audit writes
// them with Options.Write, and otherwise requires each byte for byte.
//
// It links no lab package. The server's reply texts, the key and fault
// syntax, where a fault acts on a target and the experiments' parameters
// are the audit's own copies; the protocol constants are read from the
// source with go/parser; the lab uses the audit's packages (strict, dsse,
// stormmodel), never the reverse.
//
// Every evidence file is either re-derived and compared byte for byte, or
// checked field by field, and Audit reports every failure, not only the
// first, each in a group of checks (Checks, in report order, each saying
// what it covers).
//
// A passing Report lists what its checks re-derived, what they checked for
// consistency only (counts no audit can recompute from bytes) and what was
// not checked here (claims.go). Reproduce runs the lab again and
// re-observes those counts (reproduce.go). Compare tells whether two
// evidence folders hold byte-identical deterministic files and, where they
// do not, which runs or strategies differ (compare.go).
package audit

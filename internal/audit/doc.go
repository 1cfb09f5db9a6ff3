// Package audit is idemlab's one judge. It re-checks an evidence folder
// against the checkout, trusting nothing but bytes (the case files, the
// schemas, the target folders, the sources and their git history), derives
// every verdict and renders every file a person reads (REPORT.md,
// TARGETS.md, verdicts.json, the chaos timelines, jitter.svg, the in-toto
// statement): Audit writes them with Options.Write, and otherwise requires
// each byte for byte. It reports every failure, not only the first, each
// in a group of checks (Checks).
//
// It links no lab package: the server's reply texts, the key and fault
// syntax and the experiments' parameters are its own copies, and the
// protocol constants are read from the source with go/parser. The lab
// uses the audit's packages (strict, dsse, stormmodel), never the reverse.
package audit

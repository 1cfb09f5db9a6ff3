// Package audit re-checks idemlab evidence, trusting nothing but bytes,
// the case files in cases/ and the schemas in schema/.
//
// It shares no code with the runner that wrote the evidence (nor with the
// experiments: it carries its own jitter model). Audit runs six groups of
// checks and reports every failure, not only the first:
//
//  1. schemas: manifest.json, results.json and run.json against their
//     JSON schemas (case files must be valid too, or nothing can be checked);
//  2. files: every file listed in manifest.files exists with its SHA-256,
//     and no other file sits in the evidence folder;
//  3. sources: every source listed in manifest.sources matches the checkout
//     (CRLF folded to LF), and no source file of the checkout is unlisted;
//  4. run set: results.json holds exactly one run per (case, store), in
//     case-file order then store order, consistent with manifest.selection;
//  5. expectations: counter, exit codes and every expected call field;
//  6. experiments, when manifest.files lists them: retries.json and
//     jitter.json against their schemas; retries.json holds exactly the
//     design's rows, each row's counts add up to its intents, never-retry
//     duplicates nothing, retry-no-key loses nothing, retry-same-key on the
//     sound registry neither loses nor duplicates and on
//     record-after-effect duplicates; jitter.json holds the design's
//     parameters and exactly the peaks, totals and buckets the audit's own
//     implementation of the model computes.
//
// Compare tells whether two evidence folders hold byte-identical
// deterministic files (results.json; jitter.json and jitter.svg where
// present) and, where they do not, which runs or strategies differ.
package audit

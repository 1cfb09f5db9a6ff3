// Package audit re-checks idemlab evidence, trusting nothing but bytes,
// the case files in cases/, the schemas in schema/, the target folders in
// targets/, the checkout's sources and its git history.
//
// It shares no code with the runner that wrote the evidence, nor with the
// server or the experiments: it carries its own jitter model and drawing,
// its own copy of the server's reply texts, key and fault syntax, its own
// reading of the protocol constants (go/parser, not an import) and its own
// REPORT.md and TARGETS.md renderers, and its own judge of a run on a
// target (a service the lab did not write). Nothing is believed because
// its hash matches: every evidence file is either re-derived and compared
// byte for byte, or checked field by field. Audit runs these groups of checks (Checks, in
// report order) and reports every failure, not only the first:
//
//  1. schema: manifest.json, results.json, run.json, retries.json,
//     jitter.json, targets.json and each target.json it holds against
//     their JSON schemas, after a strict read: valid UTF-8, no duplicate
//     member names at any depth, no trailing data, nesting under 64 levels,
//     at most the document's caps of values and objects (read.go); at most
//     100 failures printed a document, the rest counted (case files must
//     pass too, or nothing can be checked);
//  2. file: every file in manifest.files is a regular file inside the
//     evidence folder (no symlink, FIFO or device, never followed) within
//     its size cap (see CapManifest and the other caps), with its SHA-256;
//     every file the selection implies is listed (results.json, run.json
//     and REPORT.md for cases on stores; targets.json and TARGETS.md for
//     cases on targets: a run with -target alone selects no store); only
//     files the runner writes for the selection are (files.go); nothing
//     else is there;
//  3. source: every source in manifest.sources matches the checkout (CRLF
//     folded to LF), no source is unlisted, no source is a symlink, and
//     nothing outside the list changes the build: no go.work, go.work.sum
//     or vendor/, no replace by a folder in go.mod;
//  4. manifest: generated_utc, go_version, os_arch and postgres_version
//     look like what they claim; source_dirty fails unless -allow-dirty;
//     unsafe_registry (a mutation run) fails unless -allow-mutation;
//     protocol equals the constants of internal/protocol and the runs'
//     observations (capacity: distinct keys accepted before the first 429;
//     crash_exit_code: exactly the processes a crash fault stopped;
//     max_body: which bodies got 413); source_commit is a commit of the
//     checkout whose tree hashes to manifest.sources (a note says so when
//     there is no git history); server_build records the pinned build, a
//     prebuilt server fails unless -rebuild reproduces server_sha256;
//     targets equals targets.json's targets entry by entry (name, dir,
//     digest, libraries, runtime, skipped);
//     flags names only knobs of the selected experiments, each as the
//     runner writes it, within its range (params.go);
//  5. runset: results.json holds exactly the runs manifest.selection
//     lists (cases × stores), in case-file order then store order; a
//     partial selection audits on its own and the PASS line names it;
//     cases are run on stores, on targets (selection.targets) or both;
//  6. expectation: counter, exit codes and every expected call field;
//  7. calls: every call's step, key ({i} and {n} expanded), fault and
//     replica are what the case's steps send, and every reply is one the
//     server sends: its fixed texts for refusals, a decimal counter and a
//     replayed flag for 200;
//  8. runfile: run.json has the same runs and calls as results.json, the
//     servers' exit codes equal results.json's, client launch indexes are
//     consistent with the recorded order (the owner of a concurrent group
//     first), timestamps are RFC 3339, durations are non-negative, servers
//     listen on loopback;
//  9. target: targets.json (targets.go) holds selection.targets in order,
//     each with one run per selected case in order; a target folder inside
//     the checkout is re-read (its target.json byte for byte, the folder's
//     digest, the library versions its lock file pins); a case runs on a
//     target exactly when the audit's own placement of its faults and its
//     other rules allow (targetspec.go), and a run's calls, processes and
//     sink journal agree with its case (the counter is the journal's
//     length, numbered 1..n, each entry's body one a call sent), its
//     verdict equals the audit's own judge (targetjudge.go) field by field,
//     and a target that mirrors a store lists exactly its differences from
//     that store's native run. A target's observations themselves are not
//     reproducible run to run, and a folder outside the checkout or a
//     skipped target is not re-derived: the notes say so;
//  10. report: REPORT.md and TARGETS.md equal the audit's own rendering of
//     the verified runs, byte for byte;
//  11. experiment: retries.json has the design's parameters and seed (or
//     the knobs manifest.flags records) and rows, never-retry's sent is
//     what the seed's drop decisions leave, and its claims hold as far as
//     its parameters allow (retries_claims.go); jitter.json holds exactly
//     what the audit's own run of the jitter model computes, and
//     jitter.svg is byte for byte the audit's own drawing of it;
//  12. chaos: chaos.json and each store's history (chaos.go,
//     chaoshistory.go): every line strict; the parameters and seed
//     pinned; the schedule and the kill plan drawn again from the seed
//     (chaos_schedule.go) and every history checked for consistency with
//     them and with itself (chaos_consistency.go); the audit's own checker
//     run again on the history and its journal, chaos.json's counts and
//     verdict equal to its findings, no violation of a rule the store
//     promises, named by intent (at most 10 printed a rule, the rest
//     counted);
//  13. statement: statement.intoto.json (statement.go) is present and
//     valid; its subjects are manifest.files and manifest.json with their
//     SHA-256, its passed and failed tests the audit's own verdicts on the
//     runs, its configuration the manifest's commit and case files; a
//     DSSE envelope beside it (runner -sign) signs exactly its bytes, and
//     with -verify-key a signature verifies with that key (dsse.go).
//
// A passing Report lists what its checks re-derived, what they checked for
// consistency only (counts no audit can recompute from bytes) and what was
// not checked here (claims.go). Reproduce runs the lab again and
// re-observes those counts (reproduce.go).
//
// Compare tells whether two evidence folders hold byte-identical
// deterministic files (results.json, jitter.json, jitter.svg, REPORT.md;
// optional ones where present) and, where they do not, which runs or
// strategies differ.
package audit

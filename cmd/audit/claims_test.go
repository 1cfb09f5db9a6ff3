package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"idemlab/internal/audit"
)

// claimForgeries ties every claim the audit's PASS output can list as
// re-derived or consistency-checked to a golden story whose forgery
// breaks it: the story holds "--> FAIL 1" and this failure line
// (TestAuditCommand checks the golden is the audit's real output).
var claimForgeries = map[string]struct{ story, line string }{
	"files":          {"forge-evidence-notes.txtar", "file NOTES.md: listed in the manifest, but the runner writes no such file"},
	"sources":        {"source.txtar", "source internal/protocol/protocol.go: SHA-256 does not match the checkout"},
	"commit":         {"forge-manifest-commit.txtar", "is not a commit in the checkout's history"},
	"protocol":       {"forge-manifest-capacity.txtar", "manifest.json: protocol.capacity: expected 64 (DefaultCapacity in internal/protocol), observed 65"},
	"results":        {"forge-results-step.txtar", "step: expected 2 (as the case's steps send), observed 1"},
	"report":         {"forge-report.txtar", "REPORT.md: differs from the audit's own rendering"},
	"jitter":         {"jitter.txtar", "jitter.json: strategy full: peak: expected 157, observed 150"},
	"params":         {"forge-retries-halved.txtar", "retries.json: parameters: intents: expected 200 (the design's; manifest.json flags records no intents), observed 100"},
	"retries_sent":   {"forge-retries-halved.txtar", "retries.json: row never-retry/sound: sent: expected 91 (the intents whose one attempt seed 1 does not drop"},
	"chaos_schedule": {"forge-chaos-seed.txtar", "the schedule of seed 2 ("},
	"chaos_verdict":  {"forge-chaos-verdicts.txtar", "verdicts.json: differs from the audit's own rendering"},
	"chaos_timeline": {"forge-chaos-timeline.txtar", "chaos-durable.svg: differs from the audit's own rendering"},
	"targets_report": {"forge-targets.txtar", "TARGETS.md: differs from the audit's own rendering"},
	"targets":        {"forge-targets.txtar", "counter: expected 2 (the effects in the sink's journal), observed 1"},
	"statement":      {"forge-statement.txtar", "statement.intoto.json: differs from the audit's own rendering"},
	"rebuild":        {"forge-manifest-sha.txtar", "manifest.json: server_sha256: does not match a rebuild"},
	"signature":      {"sign.txtar", "no signature verifies with the key of -verify-key"},
	"runfile":        {"forge-run-exitcode.txtar", "run.json: case crash_after_effect, store volatile: servers' exit codes"},
	"retries":        {"forge-retries-rae1.txtar", "lost+applied_once+duplicated: expected 200 (parameters.intents), observed 151"},
	"chaos_history":  {"forge-chaos-replayed.txtar", "marked replayed, but none of its earlier attempts"},
	"chaos_promises": {"forge-chaos-hide.txtar", "store durable promises no lost_ack"},
}

// Ensure every claim the honest fixture folders' audits list as
// re-derived or consistency-checked is broken by a forgery a golden story
// shows failing, and every forgery's claim is made: no claim without a
// check (internal/audit's TestClaimsMade ties every claim to its code). And ensure a claim is listed only where its
// check ran: the chaos-only folder claims nothing of results, REPORT.md,
// the jitter model or retries, the cases-only folder nothing of the
// experiments.
func TestClaimsHaveChecks(t *testing.T) {
	if setupErr != "" {
		t.Fatal(setupErr)
	}
	// The honest folders, pinned so that -rebuild reproduces the server.
	dir := t.TempDir()
	made := map[string][]string{}
	for _, name := range []string{"evidence", "retries", "jitter", "chaos", "signed"} {
		ev := filepath.Join(dir, name)
		if err := os.CopyFS(ev, os.DirFS(filepath.Join(snapshot, name))); err != nil {
			t.Fatal(err)
		}
		opts := audit.Options{Root: snapshot, Evidence: ev}
		if name == "signed" {
			// Signed: checked before pin rewrites the manifest (the
			// statement is then derived again, signed with the same key).
			opts.VerifyKey = filepath.Join(snapshot, "keys", "test_ed25519.pub")
			made[name] = append(made[name], claimsOf(t, opts)...)
		}
		if err := pin(snapshot, ev); err != nil {
			t.Fatal(err)
		}
		write := audit.Options{Root: snapshot, Evidence: ev, Write: true}
		if name == "signed" {
			write.SignKey = signKey
		}
		if _, err := audit.Audit(write); err != nil {
			t.Fatal(err)
		}
		opts.Rebuild, opts.VerifyKey = true, ""
		made[name] = append(made[name], claimsOf(t, opts)...)
	}
	var all []string
	for _, c := range made {
		all = append(all, c...)
	}
	for _, id := range all {
		f, ok := claimForgeries[id]
		if !ok {
			t.Errorf("claim %q: no forgery in claimForgeries breaks it", id)
			continue
		}
		data, err := os.ReadFile(filepath.Join("testdata", f.story))
		if err != nil {
			t.Errorf("claim %q: %v", id, err)
			continue
		}
		if !strings.Contains(string(data), "--> FAIL 1") || !strings.Contains(string(data), f.line) {
			t.Errorf("claim %q: %s does not fail with %q", id, f.story, f.line)
		}
	}
	for id := range claimForgeries {
		if !slices.Contains(all, id) {
			t.Errorf("claimForgeries: %q is no claim an honest fixture folder's audit makes", id)
		}
	}
	for folder, none := range map[string][]string{
		"chaos":  {"results", "report", "runfile", "jitter", "retries", "retries_sent", "targets", "targets_report"},
		"signed": {"jitter", "retries", "retries_sent", "params", "chaos_schedule", "chaos_verdict", "chaos_timeline", "chaos_history", "chaos_promises"},
	} {
		for _, id := range none {
			if slices.Contains(made[folder], id) {
				t.Errorf("%s/: claims %q, whose check does not run there", folder, id)
			}
		}
	}
}

// signKey is the throwaway key the fixture's signed/ folder is signed
// with (runner -sign in TestRegenerateFixture); the goldens verify it with
// testdata/fixture/keys/test_ed25519.pub.
const signKey = "../../internal/audit/dsse/testdata/keys/test_ed25519"

// claimsOf audits opts, which must pass, and returns the ids of the claims
// it listed as re-derived or consistency-checked.
func claimsOf(t *testing.T, opts audit.Options) []string {
	t.Helper()
	r, err := audit.Audit(opts)
	if err != nil || !r.Pass {
		t.Fatalf("audit %s: %v %v", opts.Evidence, err, r.Failures)
	}
	var out []string
	for _, c := range append(r.Rederived, r.Consistent...) {
		out = append(out, c.ID)
	}
	return out
}

package audit

import (
	"fmt"
	"slices"
	"strings"
)

// What a passing audit proved, in three lists (the PASS output and -json
// alike): re-derived from the checkout and the audit's own code, so that
// no forgery passes; consistency-checked only, since what happened on a
// machine cannot be recomputed (audit -reproduce re-observes it); and not
// checked here, named so that nobody reads the PASS line as saying it. A
// claim is recorded by the check that makes it, when it ran (a.claim):
// an audit that skipped a check cannot list its claim.

// A ClaimKind is one of the three lists.
type ClaimKind string

// The lists, in the order they print.
const (
	Rederived  ClaimKind = "rederived"
	Consistent ClaimKind = "consistency_checked"
	NotChecked ClaimKind = "not_checked"
)

// A Claim is one line of a list: a stable id and the words.
type Claim struct {
	ID   string `json:"id"`
	Text string `json:"claim"`
}

// claimDefs are every claim the audit can make, by id.
var claimDefs = map[string]struct {
	kind ClaimKind
	text string
}{
	// Re-derived.
	"files":          {Rederived, "the evidence files: every listed file has its SHA-256, the folder holds nothing unlisted but what the audit derives, and every listed file is one the runner writes for this selection"},
	"sources":        {Rederived, "the sources: every file manifest.sources lists hashes to the checkout's, none is missing or added, and nothing outside them (go.work, vendor/, a local replace) changes the build"},
	"commit":         {Rederived, "source_commit: a commit of the checkout's history whose tree holds exactly those sources"},
	"protocol":       {Rederived, "the protocol constants in manifest.json: those of internal/protocol (read from the source), and what the runs observed of them"},
	"results":        {Rederived, "results.json: exactly the runs the selection implies, each run's counter, exit codes and calls as its case file's steps and expectation and the server's reply texts require"},
	"report":         {Rederived, "the verdicts on the runs on stores (verdicts.json, REPORT.md): each run judged against its case's expectation by the audit, and its rendering byte for byte the audit's own"},
	"jitter":         {Rederived, "jitter.json: byte for byte the audit's own run of the jitter model, and jitter.svg its own drawing of it"},
	"params":         {Rederived, "the experiments' parameters and seeds: the design's, or the knobs manifest.flags records"},
	"retries_sent":   {Rederived, "retries.json, never-retry's sent: each intent's one drop decision drawn again from the seed"},
	"chaos_schedule": {Rederived, "the chaos schedule: every attempt's replica, fault and backoff, and the nemesis's kills, drawn again from the seed and parameters"},
	"chaos_verdict":  {Rederived, "the chaos verdicts (verdicts.json): each history's counts and findings by the audit's own checker, by the claims of its store or target"},
	"chaos_timeline": {Rederived, "the chaos timelines: each chaos-NAME.svg byte for byte the audit's own drawing of its history"},
	"targets_report": {Rederived, "the verdicts on the runs on targets (verdicts.json, TARGETS.md): each run judged by the audit, safety apart from conformance, and its rendering byte for byte the audit's own"},
	"statement":      {Rederived, "statement.intoto.json: its subjects every evidence file with its SHA-256, its tests the audit's own verdicts on the runs, byte for byte the audit's own"},
	"rebuild":        {Rederived, "server_sha256: cmd/effectserver, rebuilt from the checkout with the recorded recipe, hashes to it"},
	"signature":      {Rederived, "the signature: statement.intoto.json is signed (DSSE, ed25519) by the key %s"},

	// Consistency-checked.
	"runfile":        {Consistent, "run.json: the same runs, calls and exit codes as results.json; its times, launch order and addresses consistent"},
	"retries":        {Consistent, "retries.json: each row's counts add up to the intents and stay within what its parameters allow, and the design's claims hold (never-retry loses at least the intents the seed drops, retry-same-key on the sound registry loses and duplicates none, on record-after-effect duplicates some, ...)"},
	"chaos_history":  {Consistent, "the chaos histories: each intent's key, body and attempts in order; every effect an intent's body, no more of them than attempts that may have applied it, and a reply marked replayed after an earlier attempt and effect at its place (on a store); every planned kill named by its kill, followed by the replica's exit and a restart, or its skip with a reason; a shared store in one place, a target's journal its sink's"},
	"targets":        {Consistent, "targets.json: on each target, one run per selected case that may run there, its calls, processes and sink journal as its case's steps require; what the target did is the lab's observation of code it did not write, not reproducible run to run"},
	"chaos_promises": {Consistent, "the chaos runs: no rule a store promises is broken in its history (no duplicate on durable and postgres, no lost acknowledgement, nothing stuck, acknowledged values in order)"},

	// Not checked here.
	"server_word":  {NotChecked, "the server binary: server_sha256 is the runner's word (audit -rebuild rebuilds it from the checkout)"},
	"server_ran":   {NotChecked, "that this binary made the evidence: a rebuild shows that the checkout builds to server_sha256, not that the runs used it (evidence of a weaker build with its hashes rewritten passes)"},
	"commit_none":  {NotChecked, "source_commit's tree: not compared with the checkout's git history (a note says why)"},
	"who":          {NotChecked, "who ran it: no signature checked (runner -sign KEYFILE writes one, audit -verify-key PUBFILE checks it)"},
	"versions":     {NotChecked, "the versions recorded: %s: the runner's word, checked for their form at most, not re-read"},
	"observations": {NotChecked, "that the non-deterministic evidence was observed: retries.json's rows, the chaos histories (their attempts and journal alike; an effect left out and the values after it renumbered, say) and the runs on targets, whichever it holds, can be invented to hang together; a signature does not change that; audit -reproduce re-observes them"},
}

// claim records that the check behind id ran; a claim is listed once, in
// the order first recorded.
func (a *auditor) claim(id string, arg ...any) {
	d, ok := claimDefs[id]
	if !ok {
		panic("audit: unknown claim " + id) // a programmer error
	}
	text := d.text
	if len(arg) > 0 {
		text = fmt.Sprintf(text, arg...)
	}
	list := a.report.list(d.kind)
	if !slices.ContainsFunc(*list, func(c Claim) bool { return c.ID == id }) {
		*list = append(*list, Claim{id, text})
	}
}

func (r *Report) list(kind ClaimKind) *[]Claim {
	switch kind {
	case Rederived:
		return &r.Rederived
	case Consistent:
		return &r.Consistent
	default:
		return &r.NotChecked
	}
}

// rederived reports whether the re-derived list holds claim id.
func (r *Report) rederived(id string) bool {
	return slices.ContainsFunc(r.Rederived, func(c Claim) bool { return c.ID == id })
}

// claimHeads are the lists' headings in the text output.
var claimHeads = []struct {
	kind ClaimKind
	head string
}{
	{Rederived, "re-derived (recomputed from the checkout and the audit's own code, and compared):"},
	{Consistent, "consistency-checked (they hang together as the design requires; counts invented to hang together would too: audit -reproduce re-observes them):"},
	{NotChecked, "not checked here:"},
}

// unchecked records what the audit did not check, after the checks ran.
func (a *auditor) unchecked() {
	if !a.report.rederived("rebuild") {
		a.claim("server_word")
	}
	a.claim("server_ran")
	if !a.report.rederived("commit") {
		a.claim("commit_none")
	}
	if !a.report.rederived("signature") {
		a.claim("who")
	}
	if v := a.uncheckedVersions(); len(v) > 0 {
		a.claim("versions", strings.Join(v, "; "))
	}
	if slices.ContainsFunc(a.report.Consistent, func(c Claim) bool { return c.ID == "retries" || c.ID == "chaos_history" || c.ID == "targets" }) {
		a.claim("observations")
	}
}

// uncheckedVersions names the versions the manifest and targets.json
// record that no check re-read: Go's and the OS's (but where -rebuild
// reproduced the server, whose bytes depend on both), PostgreSQL's, and
// the targets' runtimes (their libraries are re-read from their lock
// files).
func (a *auditor) uncheckedVersions() []string {
	var out []string
	_, goVer := a.manifest["go_version"]
	_, osArch := a.manifest["os_arch"]
	if (goVer || osArch) && !a.report.rederived("rebuild") {
		out = append(out, "Go's and the OS's (manifest.json go_version, os_arch)")
	}
	if _, ok := a.manifest["postgres_version"]; ok {
		out = append(out, "PostgreSQL's (manifest.json postgres_version)")
	}
	var runtimes []string
	targets, _ := a.manifest["targets"].([]any)
	for _, t := range targets {
		tm, _ := t.(map[string]any)
		if r, _ := str(tm, "runtime"); r != "" {
			n, _ := str(tm, "name")
			runtimes = append(runtimes, n)
		}
	}
	if len(runtimes) > 0 {
		out = append(out, "the runtime targets.json records for "+strings.Join(runtimes, ", "))
	}
	return out
}

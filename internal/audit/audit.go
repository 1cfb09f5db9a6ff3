package audit

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"idemlab/internal/audit/shard"
	"path/filepath"
	"slices"
	"strings"

	"idemlab/internal/audit/dsse"
)

// Options says what to audit.
type Options struct {
	Root     string // the checkout: cases/, schema/ and the source files
	Evidence string // the evidence folder
	Case     string // only this case ("" for all)
	Store    string // only this store ("" for every store a case expects)

	AllowDirty    bool   // accept evidence from a checkout with uncommitted changes
	AllowMutation bool   // accept a mutation run (manifest.unsafe_registry)
	Rebuild       bool   // rebuild cmd/effectserver and compare its SHA-256 with server_sha256
	VerifyKey     string // an ed25519 public key file whose key must have signed the statement (dsse.go)
	Write         bool   // write the derived files into the evidence folder, not compare them (derived.go)
	SignKey       string // with Write, an ed25519 private key file to sign the statement with (dsse.go)
}

// A Check names a group of checks; every Failure carries one.
type Check string

// The check groups, in the order their failures are reported (see Checks).
const (
	CheckSchema      Check = "schema"      // evidence files against schema/
	CheckFile        Check = "file"        // evidence files: present, regular, capped, hashed, listed
	CheckSource      Check = "source"      // the checkout's sources and build inputs against manifest.sources
	CheckManifest    Check = "manifest"    // manifest fields: provenance, protocol, build, mutation, dirtiness
	CheckRunSet      Check = "runset"      // results.json's runs against the cases and the selection
	CheckExpectation Check = "expectation" // each run against its case's expectation
	CheckCalls       Check = "calls"       // each call against the case's steps and the server's fixed replies
	CheckRunFile     Check = "runfile"     // run.json against results.json
	CheckDerived     Check = "derived"     // what the audit derives (REPORT.md, TARGETS.md, verdicts.json, timelines, jitter.svg, the statement) against the folder's
	CheckTarget      Check = "target"      // targets.json: each target's folder, runs and verdicts (targets.go)
	CheckExperiment  Check = "experiment"  // retries.json, jitter.json and jitter.svg
	CheckChaos       Check = "chaos"       // chaos.json and each store's history, judged again (chaos.go)
	CheckStatement   Check = "statement"   // the statement's DSSE envelope against the statement and -verify-key (dsse.go)
)

// Checks lists every check group in report order.
var Checks = []Check{CheckSchema, CheckFile, CheckSource, CheckManifest, CheckRunSet, CheckExpectation, CheckCalls, CheckRunFile, CheckTarget, CheckExperiment, CheckChaos, CheckDerived, CheckStatement}

func (c Check) rank() int { return slices.Index(Checks, c) }

// Failure is one failed check: Message as printed, the other fields its
// parts for machines.
type Failure struct {
	Check    Check  `json:"check"`
	Case     string `json:"case"`
	Store    string `json:"store"`
	Target   string `json:"target,omitempty"` // for a failure about a target (targets.json)
	Call     *int   `json:"call"`
	Field    string `json:"field"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	Message  string `json:"message"`
}

// Report is the verdict of an audit.
type Report struct {
	Pass        bool      `json:"pass"`
	Checks      int       `json:"checks"` // schema, file, run-set, expectation and experiment checks made
	Failures    []Failure `json:"failures"`
	Runs        int       `json:"runs"`    // runs in results.json
	Cases       int       `json:"cases"`   // cases required
	Stores      int       `json:"stores"`  // stores required
	Calls       int       `json:"calls"`   // calls in results.json
	Files       int       `json:"files"`   // evidence files whose hash matched
	Sources     int       `json:"sources"` // source files whose hash matched
	SourceDirty bool      `json:"source_dirty"`
	Experiments []string  `json:"experiments"` // experiment files checked, by experiment name
	// The runs on targets, when the selection names targets.
	Targets        []string `json:"targets,omitempty"`
	TargetRuns     int      `json:"target_runs,omitempty"`
	TargetCalls    int      `json:"target_calls,omitempty"`
	TargetsNotRun  int      `json:"target_not_run,omitempty"`
	TargetsSkipped int      `json:"targets_skipped,omitempty"`
	ChaosTargets   []string `json:"chaos_targets,omitempty"` // the targets whose chaos histories were checked
	Subset         []string `json:"subset"`                  // how the evidence or the audit covers less than everything, e.g. "stores: volatile only"
	Shard          string   `json:"shard,omitempty"`         // "K/N": the folder is slice K of N of a run (runner -shard), judged once merged
	Summary        string   `json:"summary,omitempty"`       // with -write, the verdicts in words (report.go)
	Notes          []string `json:"notes"`

	// What the checks that ran proved (claims.go).
	Rederived  []Claim `json:"rederived"`
	Consistent []Claim `json:"consistency_checked"`
	NotChecked []Claim `json:"not_checked"`

	verdicts      *verdictsDoc      // as verdicts.json holds them: what Gate and JUnit read (junit.go)
	caseSummaries map[string]string // each case's summary, by name
}

// Audit checks the evidence folder against the checkout. It returns an
// error only when it cannot read its inputs; failed checks are in the
// Report.
func Audit(opts Options) (*Report, error) {
	a, err := newAuditor(opts)
	if err != nil {
		return nil, err
	}
	a.readFlags() // params.go
	a.selectRuns()
	a.checkFiles()
	a.checkSources()
	a.checkManifest()
	results := a.checkStoreRuns()
	a.checkTargets(results) // targets.go
	a.checkSkips()          // targets.go: a skip's program, used by no other run
	a.checkExperiments()
	a.deriveVerdicts()            // verdicts.go
	a.deriveStatement()           // derived.go
	a.checkSignature(a.statement) // dsse.go
	a.checkUnlisted()             // files.go
	a.unchecked()                 // claims.go
	return a.finish()
}

// newAuditor reads the schemas, case files, keys and manifest.
func newAuditor(opts Options) (*auditor, error) {
	schemas, err := LoadSchemas(opts.Root)
	if err != nil {
		return nil, err
	}
	cases, err := LoadCases(opts.Root, schemas)
	if err != nil {
		return nil, err
	}
	if err := checkNarrowing(cases, opts.Case, opts.Store); err != nil {
		return nil, err
	}
	if err := checkDir("evidence folder", opts.Evidence); err != nil {
		return nil, err
	}
	a := &auditor{opts: opts, schemas: schemas, allCases: cases, data: map[string][]byte{}, derived: map[string]string{},
		report: &Report{Failures: []Failure{}, Notes: []string{}, Experiments: []string{}, Subset: []string{},
			Rederived: []Claim{}, Consistent: []Claim{}, NotChecked: []Claim{}}}
	if opts.VerifyKey != "" {
		if a.verifyKey, err = readKey("-verify-key", opts.VerifyKey, dsse.ParsePublicKey); err != nil {
			return nil, err
		}
		a.verifyKeyID = dsse.Fingerprint(a.verifyKey)
	}
	if opts.SignKey != "" {
		if !opts.Write {
			return nil, errors.New("-sign writes a signed statement: it goes with -write")
		}
		if a.signKey, err = readKey("-sign", opts.SignKey, dsse.ParsePrivateKey); err != nil {
			return nil, err
		}
	}
	manifestPath := filepath.Join(opts.Evidence, "manifest.json")
	data, err := readInside(opts.Evidence, "manifest.json", CapManifest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", manifestPath, unwrapPath(err))
	}
	mv, err := decodeJSON(data, capManifestJSON)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", manifestPath, jsonRefusal(err))
	}
	var ok bool
	if a.manifest, ok = mv.(map[string]any); !ok {
		return nil, fmt.Errorf("%s: not a JSON object", manifestPath)
	}
	a.check()
	for _, l := range validate(schemas.Manifest, mv) {
		a.failf(CheckSchema, "manifest.json: %s", l)
	}
	return a, nil
}

// checkStoreRuns checks the runs on stores (results.json, run.json) and
// derives REPORT.md; it returns results.json when it is valid.
func (a *auditor) checkStoreRuns() map[string]any {
	switch {
	case len(a.selStores) == 0 && len(a.stores) == 0 && len(a.selCases) == 0 && a.isListed("results.json"):
		a.failf(CheckRunSet, "manifest.json: selection.cases: empty, but manifest.files lists results.json")
		return nil
	case len(a.selStores) == 0 && len(a.stores) == 0:
		if a.isListed("results.json") {
			a.failf(CheckRunSet, "manifest.json: selection.stores: empty, but manifest.files lists results.json")
		}
		return nil
	}
	results, _ := a.jsonDoc("results.json", a.schemas.Results).(map[string]any)
	a.runDoc, _ = a.jsonDoc("run.json", a.schemas.Run).(map[string]any)
	a.release("run.json")
	checked := results
	if checked == nil && !a.isListed("results.json") && len(a.selStores) == 0 {
		// -case in an experiment-only folder, -store in a targets-only
		// one: every run is missing.
		checked = map[string]any{"runs": []any{}}
	}
	if checked == nil {
		a.note("results.json is missing or invalid: the run set, the expectations and the calls were not checked")
		return nil
	}
	runs := a.checkRunSet(checked)
	a.checkExpectations(runs)
	a.checkCalls(runs)
	if len(runs) > 0 {
		a.claim("results")
	}
	a.checkObservedProtocol(runs)
	a.checkRunFile(checked)
	a.runDoc = nil // checked: not kept through the experiments' checks
	a.deriveReport(checked)
	return results
}

// finish completes the report once every check ran.
func (a *auditor) finish() (*Report, error) {
	if a.opts.Write {
		a.report.Summary = a.summaryText()
	}
	if a.writeErr != nil {
		return nil, fmt.Errorf("write the derived files into %s: %w", a.opts.Evidence, a.writeErr)
	}
	if len(a.selCases) == 0 && len(a.cases) == 0 {
		a.note("an experiment-only folder (manifest.json selects no cases): no case runs were required")
	}
	slices.SortStableFunc(a.report.Failures, func(x, y Failure) int { return x.Check.rank() - y.Check.rank() })
	a.report.Pass = len(a.report.Failures) == 0
	return a.report, nil
}

// checkNarrowing checks -case and -store against the case files.
func checkNarrowing(cases []*Case, onlyCase, onlyStore string) error {
	if onlyCase != "" && !slices.ContainsFunc(cases, func(c *Case) bool { return c.Name == onlyCase }) {
		return fmt.Errorf("-case %s: no file in cases/ has this name", onlyCase)
	}
	if onlyStore != "" && !slices.Contains(knownStores(cases), onlyStore) {
		return fmt.Errorf("-store %s: unknown store (known: %s)", onlyStore, strings.Join(knownStores(cases), ", "))
	}
	return nil
}

// knownStores are StoreOrder and every store a case file names, in order.
func knownStores(cases []*Case) []string {
	known := slices.Clone(StoreOrder)
	for _, c := range cases {
		for s := range c.Expect {
			if !slices.Contains(known, s) {
				known = append(known, s)
			}
		}
	}
	return orderStores(known)
}

type auditor struct {
	opts     Options
	schemas  *Schemas
	allCases []*Case // every case file, in file order
	manifest map[string]any
	prefixes map[string]string // target NUL key_prefix: the case of the shared run that drew it
	listed   map[string]string // manifest.files
	data     map[string][]byte // evidence files read (whatever their hash)
	runDoc   map[string]any    // run.json, when schema-valid

	flagValues    map[string]int64   // the knobs manifest.flags records, by parameter (params.go)
	skippedClaims []string           // retries claims a recorded knob moved away from the design's (retries_claims.go)
	statement     []byte             // statement.intoto.json, as derived
	signKey       ed25519.PrivateKey // -sign's key, with -write
	derived       map[string]string  // the files derived so far, by name: their SHA-256 (derived.go)
	writeErr      error              // what -write could not write
	unlisted      []string           // files of the folder the manifest does not list, with derived names (checkUnlisted)

	// The verdicts, as they are derived, for verdicts.json (verdicts.go).
	storeVerdicts  []storeVerdict
	targetVerdicts []targetVerdict
	chaosVerdicts  []ChaosVerdict
	verifyKey      ed25519.PublicKey
	verifyKeyID    string // its fingerprint

	selCases   []*Case     // manifest.selection.cases that name a case file
	selStores  []string    // manifest.selection.stores
	selTargets []string    // manifest.selection.targets
	slice      shard.Slice // manifest.shard: the slice of the run the folder holds; zero: the whole run
	cases      []*Case     // the cases checked in depth: the selection, narrowed by -case
	stores     []string    // the stores checked in depth: the selection, narrowed by -store

	outsideTargets []string    // targets run from a folder outside the checkout (dir empty), not re-read
	programs       programUses // the programs the runs used and the skips' missing ones (checkSkips, targets.go)

	report *Report
}

func (a *auditor) check() { a.report.Checks++ }

func (a *auditor) fail(f Failure) { a.report.Failures = append(a.report.Failures, f) }

func (a *auditor) failf(check Check, format string, args ...any) {
	a.fail(Failure{Check: check, Message: fmt.Sprintf(format, args...)})
}

func (a *auditor) note(s string) { a.report.Notes = append(a.report.Notes, s) }

// cleanRel reports whether p is a slash path that stays inside its folder.
func cleanRel(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return false
	}
	return !slices.ContainsFunc(strings.Split(p, "/"), func(s string) bool {
		return s == "" || s == "." || s == ".."
	})
}

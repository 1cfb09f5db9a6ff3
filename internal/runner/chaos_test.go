package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
	"idemlab/internal/target"
)

// Ensure runner -experiment chaos -target runs chaos on a target the lab
// has never seen and catches its in-flight lock that is checked, then set:
// chaos.json names the duplicate, a violation of the durable store it
// claims, explained by what came between the sink's receipt of its two
// calls (one process let a retry through, or a kill left the key
// unrecorded: which, the run's timing decides); the history and its timeline are
// evidence, and the audit passes (a target's finding is its result). A
// target that counts its effects with a command and names no journal is
// in chaos.json as not run, with the reason.
func TestChaosOnTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab and runs chaos on a target")
	}
	// A tiny service whose in-flight lock is checked, then set; it claims a
	// durable store (its keys are in a file in STATE) that replicas do not
	// share.
	dir := sinktest.WriteTarget(t, sinktest.Service{Name: "broken", Keys: sinktest.File, Flaw: sinktest.CheckThenSet})
	counted := countedTarget(t)
	out := filepath.Join(t.TempDir(), "evidence")
	var log bytes.Buffer
	err := Run(context.Background(), Options{Root: "../..", Out: out, Experiment: Chaos, Targets: []string{dir, counted}, Stores: protocol.Stores,
		Intents: DefaultIntents, Chaos: ChaosOptions{Trials: 2}, Stdout: &log, Stderr: &log})
	sinktest.CheckNoneLeft(t)
	if !errors.Is(err, ErrViolations) { // broken's duplicates break a rule its claims promise
		t.Fatalf("Run: %v, want %v\n%s", err, ErrViolations, log.String())
	}
	b, err := os.ReadFile(filepath.Join(out, ChaosFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Runs []struct {
			Target       string `json:"target"`
			Trial        int    `json:"trial"`
			NotRun       string `json:"not_run"`
			ReplicasNote string `json:"replicas_note"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Runs) != 3 || doc.Runs[0].Target != "broken" || doc.Runs[0].Trial != 1 || doc.Runs[1].Target != "broken" || doc.Runs[1].Trial != 2 ||
		doc.Runs[2].Target != "counted" || doc.Runs[2].Trial != 0 {
		t.Fatalf("chaos.json runs %+v, want broken's trials 1 and 2, then counted (no trial), no store", doc.Runs)
	}
	if doc.Runs[0].ReplicasNote == "" {
		t.Errorf("broken: no replicas note (it claims no shared store, so one replica runs)")
	}
	if !strings.Contains(doc.Runs[2].NotRun, "counts its effects with a command") {
		t.Errorf("counted: not_run %q, want the reason (it counts its effects with a command)", doc.Runs[2].NotRun)
	}
	var manifest struct{ Flags map[string]string }
	if b, err = os.ReadFile(filepath.Join(out, "manifest.json")); err != nil || json.Unmarshal(b, &manifest) != nil || manifest.Flags["chaos-trials"] != "2" {
		t.Errorf("manifest.json flags %v (%v), want chaos-trials 2", manifest.Flags, err)
	}
	// The audit the runner ran judged the history: verdicts.json.
	if b, err = os.ReadFile(filepath.Join(out, "verdicts.json")); err != nil {
		t.Fatal(err)
	}
	var verdicts struct {
		Chaos []struct {
			Target   string           `json:"target"`
			Trial    int              `json:"trial"`
			OK       bool             `json:"ok"`
			Counts   map[string]int64 `json:"counts"`
			Findings []struct {
				Rule, Key, Detail string
			} `json:"findings"`
		} `json:"chaos"`
	}
	if err := json.Unmarshal(b, &verdicts); err != nil {
		t.Fatal(err)
	}
	if len(verdicts.Chaos) != 3 || verdicts.Chaos[1].Trial != 2 {
		t.Fatalf("verdicts.json chaos %+v, want broken's two trials and counted", verdicts.Chaos)
	}
	broken := verdicts.Chaos[0]
	if broken.OK || broken.Counts["duplicates"] == 0 {
		t.Errorf("broken: ok %v, %d duplicates; want a violation, duplicates", broken.OK, broken.Counts["duplicates"])
	}
	caught := false
	for _, f := range broken.Findings {
		caught = caught || f.Rule == "duplicate" && strings.HasPrefix(f.Key, "chaos-") &&
			(strings.Contains(f.Detail, "by one process of replica 0, no restart between") || strings.Contains(f.Detail, "and the one started at"))
	}
	if !caught {
		t.Errorf("no finding explains a duplicate of replica 0 (one process, or a restart between the sink's receipt of its calls): %+v", broken.Findings)
	}
	for _, f := range []string{"chaos-target-broken.jsonl", "chaos-target-broken.svg", "chaos-target-broken.trial2.jsonl", "chaos-target-broken.trial2.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("evidence %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "chaos-target-counted.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a history of the target that did not run: %v", err)
	}
}

// Ensure a target whose program is missing is skipped by the chaos
// experiment with one line and a run in chaos.json saying why, and, as it
// was named with -target, that the run is no pass but the target's
// problem (a *TargetError, runner exit 7) once that evidence is written;
// IDEMLAB_REQUIRE_TARGETS=1 makes it that error at once.
func TestChaosSkipsMissingProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab")
	}
	dir := filepath.Join(t.TempDir(), "absent")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := `{
  "name": "absent",
  "summary": "a target whose runtime this machine lacks",
  "requires": ["idemlab-no-such-program"],
  "install": "nothing: it does not exist",
  "start": {"argv": ["idemlab-no-such-program", "{port}"], "env": {}, "ready": {"tcp": true}},
  "request": {"path": "/pay", "key_header": "Idempotency-Key"},
  "replay": null,
  "effects": "sink",
  "claims": {"durable": false, "shared_store": false, "capacity": null, "max_body": null}
}`
	if err := os.WriteFile(filepath.Join(dir, target.FileName), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, require := range []string{"", "1"} {
		t.Setenv(target.RequireEnv, require)
		out := filepath.Join(t.TempDir(), "evidence")
		var log bytes.Buffer
		err := Run(context.Background(), Options{Root: "../..", Out: out, Experiment: Chaos, Targets: []string{dir}, Stores: protocol.Stores,
			Intents: DefaultIntents, Stdout: &log, Stderr: &log})
		if te, ok := errors.AsType[*TargetError](err); !ok || te.Target != "absent" || !strings.Contains(err.Error(), "idemlab-no-such-program not found") {
			t.Fatalf("%s=%s: Run = %v, want a *TargetError of target absent naming the missing program\n%s", target.RequireEnv, require, err, log.String())
		}
		if require == "1" {
			continue
		}
		if !strings.Contains(log.String(), "chaos on target absent not run: skipped: idemlab-no-such-program not found (nothing: it does not exist)") {
			t.Errorf("no line says the target was skipped and why:\n%s", log.String())
		}
		b, err := os.ReadFile(filepath.Join(out, ChaosFile))
		if err != nil || !strings.Contains(string(b), `"not_run": "skipped: idemlab-no-such-program not found`) {
			t.Errorf("chaos.json does not say the target was skipped (%v):\n%s", err, b)
		}
	}
}

// countedTarget writes the shipped effectserver-durable target without its
// journal command, as target "counted" in a temporary folder, and returns
// the folder: a target chaos cannot judge intent by intent.
func countedTarget(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../targets/effectserver-durable/" + target.FileName)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["name"] = "counted"
	delete(m, "mirrors")
	delete(m["effects"].(map[string]any), "journal")
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "counted")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, target.FileName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

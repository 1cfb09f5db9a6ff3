package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"
	"idemlab/internal/target"
)

// Ensure a service its user started (the test, here, not the lab) can be
// attached to: its check-then-act is found and fails the gate, the cases
// that need a restart, a crash or replicas are not run and say why, and a
// second run against the same still-running service is judged afresh (its
// keys are the run's own, so the first run's cannot answer for it).
func TestAttachedService(t *testing.T) {
	// Serial: twice in about ten full go test runs, beside the parallel
	// tests, a case's sink could not listen again at its fixed address
	// ("address already in use"), the second time with its ports below
	// the ephemeral range; never in 15 runs alone. What took the port was
	// not found; the address is now held from a target's first case to
	// its last (caserun's TestAttachedSinkHeld), which leaves no window.
	if testing.Short() {
		t.Skip("builds the lab and runs cases on a service")
	}
	dir := writeOwnService(t)
	svcAddr, sinkAddr := sinktest.SinkAddr(t), sinktest.SinkAddr(t)
	_, port, _ := net.SplitHostPort(svcAddr)
	svc := exec.Command(filepath.Join(dir, "own-service"))
	svc.Env = append(os.Environ(), "PORT="+port, "EFFECT_URL=http://"+sinkAddr+"/charges")
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Process.Kill(); svc.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.Dial("tcp", svcAddr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service never listened on %s: %v", svcAddr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	spec := strings.Replace(ownTarget, `"start": {"argv": ["./own-service"], "env": {"PORT": "{port}", "EFFECT_URL": "{effect_url}"}, "ready": {"tcp": true}, "stop_grace_ms": 1000},`,
		fmt.Sprintf(`"attach": {"url": "http://%s", "sink_addr": "%s"},`, svcAddr, sinkAddr), 1)
	if spec == ownTarget {
		t.Fatal("ownTarget's start line moved: the test cannot make it attached")
	}
	if err := os.WriteFile(filepath.Join(dir, target.FileName), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{
		"keyed_lost_reply":              "pass",
		"concurrent_duplicate":          "violation",
		"body_conflict":                 "pass",
		"restart_after_reply":           "not run: " + target.NoProcessControl,
		"crash_after_effect":            "not run: " + target.NoProcessControl,
		"replicas_lost_reply":           "not run: " + target.NoProcessControl,
		"fails_after_effect_then_retry": "violation",
	}
	// Only the cases it checks: two others wait 2 s each on a client's
	// timeout, most of what the test took.
	cases := slices.Sorted(maps.Keys(want))
	for run := range 2 {
		out := filepath.Join(t.TempDir(), "evidence")
		var log bytes.Buffer
		err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: protocol.Stores, Intents: DefaultIntents,
			Case: strings.Join(cases, ","), Targets: []string{dir}, Stdout: &log, Stderr: &log})
		if !errors.Is(err, ErrViolations) {
			t.Fatalf("run %d: %v, want %v\n%s", run, err, ErrViolations, log.String())
		}
		got := attachedVerdicts(t, out)
		for _, cas := range cases {
			if got[cas] != want[cas] {
				t.Errorf("run %d: %s: %q, want %q", run, cas, got[cas], want[cas])
			}
		}
		if t.Failed() {
			t.Fatalf("runner output:\n%s", log.String())
		}
	}
}

// attachedVerdicts reads verdicts.json's one target: per case, its safety
// verdict or "not run: why".
func attachedVerdicts(t *testing.T, out string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "verdicts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Targets []struct {
			Runs []struct {
				Case   string `json:"case"`
				NotRun string `json:"not_run"`
				Safety string `json:"safety"`
			} `json:"runs"`
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Targets) != 1 {
		t.Fatalf("verdicts.json: %v, %d targets", err, len(doc.Targets))
	}
	got := map[string]string{}
	for _, r := range doc.Targets[0].Runs {
		got[r.Case] = r.Safety
		if r.NotRun != "" {
			got[r.Case] = "not run: " + r.NotRun
		}
	}
	return got
}

package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"idemlab/internal/protocol"
	"idemlab/internal/sink/sinktest"

	"github.com/joshdk/go-junit"
)

// ownService is a payment service the lab has never seen, written here as
// a user would write theirs: an in-memory key table, the payment made at
// the effect sink, replays marked X-Replayed: yes. It has one deliberate
// bug: a key is checked, the payment made, and only then the key set, so
// duplicates that arrive while the first payment runs each pay again.
const ownService = `package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
)

type paid struct{ body, value string }

func main() {
	var mu sync.Mutex
	done := map[string]paid{}
	http.HandleFunc("/pay", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		p, ok := done[key]
		mu.Unlock()
		switch {
		case key != "" && ok && p.body != string(body):
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		case key != "" && ok:
			w.Header().Set("X-Replayed", "yes")
			io.WriteString(w, p.value)
			return
		}
		resp, err := http.Post(os.Getenv("EFFECT_URL"), "text/plain", bytes.NewReader(body))
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		value, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if key != "" {
			mu.Lock()
			done[key] = paid{string(body), string(value)}
			mu.Unlock()
		}
		w.Header().Set("X-Replayed", "no")
		w.Write(value)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.Serve(ln, nil)
}
`

// ownTarget is its target.json, as docs/targets.md shows a user.
const ownTarget = `{
  "name": "own-service",
  "summary": "a payment service the lab has never seen, with a check-then-set bug",
  "start": {"argv": ["./own-service"], "env": {"PORT": "{port}", "EFFECT_URL": "{effect_url}"}, "ready": {"tcp": true}, "stop_grace_ms": 1000},
  "request": {"method": "POST", "path": "/pay", "key_header": "Idempotency-Key"},
  "replay": {"header": "X-Replayed", "value": "yes"},
  "effects": "sink",
  "claims": {"durable": false, "shared_store": false, "capacity": null, "max_body": null}
}
`

// Ensure a user can test a service of their own: a folder outside the
// checkout with the service and its target.json, one runner -target DIR,
// and the verdicts the audit the runner ran wrote (verdicts.json):
// the service's sound behaviour passes, its deliberate bug is found and
// named (and fails the gate: ErrViolations, exit 6), the cases it cannot
// express say why, the JUnit report lists every case as the verdicts say,
// and none of its processes outlives the run.
func TestYourOwnService(t *testing.T) {
	dir := writeOwnService(t)
	out := filepath.Join(t.TempDir(), "evidence")
	junitFile := filepath.Join(t.TempDir(), "junit.xml")
	var log bytes.Buffer
	err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: protocol.Stores, Intents: DefaultIntents,
		Targets: []string{dir}, JUnit: junitFile, Stdout: &log, Stderr: &log})
	if !errors.Is(err, ErrViolations) {
		t.Fatalf("runner -target %s: %v, want %v\n%s", dir, err, ErrViolations, log.String())
	}
	if !strings.Contains(log.String(), "\n  target own-service, case concurrent_duplicate: violation duplicate_effect in 1 of 1 trial\n") {
		t.Errorf("the runner's output does not list the run that fails the gate:\n%s", log.String())
	}
	sinktest.CheckNoneLeft(t, "own-service")

	b, err := os.ReadFile(filepath.Join(out, "verdicts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Targets []struct {
			Target string `json:"target"`
			Runs   []struct {
				Case     string `json:"case"`
				NotRun   string `json:"not_run"`
				Safety   string `json:"safety"`
				Findings []struct {
					Rule, Detail string
				} `json:"findings"`
			} `json:"runs"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Targets) != 1 || doc.Targets[0].Target != "own-service" {
		t.Fatalf("targets = %+v, want own-service", doc.Targets)
	}
	got := map[string]string{}
	for _, r := range doc.Targets[0].Runs {
		switch {
		case r.NotRun != "":
			got[r.Case] = "not run: " + r.NotRun
		default:
			line := r.Safety
			for _, f := range r.Findings {
				line += " " + f.Rule + ": " + f.Detail
			}
			got[r.Case] = line
		}
	}
	checkJUnit(t, junitFile, got)
	for cas, want := range map[string]string{
		"keyed_lost_reply":     "pass",
		"body_conflict":        "pass",
		"concurrent_duplicate": "violation duplicate_effect: 12 effects applied; a sound implementation applies 1",
		"crash_after_effect":   "limitation duplicate_effect",
		"replicas_lost_reply":  "not run: the case runs 2 replicas; the target claims no shared store",
	} {
		if !strings.HasPrefix(got[cas], want) {
			t.Errorf("%s: %q, want %q", cas, got[cas], want)
		}
	}
	if t.Failed() {
		t.Logf("runner output:\n%s", log.String())
		// Once (2026-12-04, two packages' tests side by side) the retry
		// after crash_after_effect's restart got no reply and the sink
		// held 1 effect, never since in 22 runs: keep what the lab
		// recorded of the case (the exchanges, the sink's calls, the
		// processes), to find why the next time.
		logCaseDetail(t, out, "crash_after_effect")
	}
}

// writeOwnService writes and builds ownService in a folder of its own.
//
// edits are pairs of strings, each old text of ownService and its
// replacement: a variant of the service.
func writeOwnService(t *testing.T, edits ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "own-service")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := ownService
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(src, edits[i]) {
			t.Fatalf("ownService has no %q to edit", edits[i])
		}
		src = strings.ReplaceAll(src, edits[i], edits[i+1])
	}
	for name, content := range map[string]string{"main.go": src, "go.mod": "module own\n\ngo 1.26\n", "target.json": ownTarget} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "own-service")
	if built, ok := ownServiceBuilt.Load(src); ok {
		if err := os.WriteFile(bin, built.([]byte), 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	build := exec.Command("go", "build", "-o", "own-service", ".")
	build.Dir, build.Env = dir, append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	built, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	ownServiceBuilt.Store(src, built)
	return dir
}

// ownServiceBuilt holds each variant's binary by its source: go build
// links it again on every call, about a second of CPU.
var ownServiceBuilt sync.Map

// checkJUnit reads the JUnit report with a JUnit reader and checks it
// lists every case of verdicts (case: "not run: ...", or the safety
// verdict and findings) with the status a CI system would show.
func checkJUnit(t *testing.T, file string, verdicts map[string]string) {
	t.Helper()
	suites, err := junit.IngestFile(file)
	if err != nil {
		t.Fatalf("read the JUnit report: %v", err)
	}
	if len(suites) != 1 || suites[0].Name != "target own-service" {
		t.Fatalf("JUnit suites %d, want one, for target own-service", len(suites))
	}
	got := map[string]junit.Status{}
	for _, tc := range suites[0].Tests {
		got[tc.Name] = tc.Status
	}
	if len(got) != len(verdicts) {
		t.Errorf("JUnit lists %d cases, the verdicts %d", len(got), len(verdicts))
	}
	for cas, v := range verdicts {
		want := junit.StatusPassed
		switch {
		case strings.HasPrefix(v, "not run: "):
			want = junit.StatusSkipped
		case strings.HasPrefix(v, "violation"):
			want = junit.StatusFailed
		}
		if got[cas] != want {
			t.Errorf("JUnit %s: %q, want %q (%s)", cas, got[cas], want, v)
		}
	}
}

// Ensure the run's exit follows the verdicts on a -target: a violation
// fails the gate, a sound target passes it, and a limitation fails it
// only with Strict.
func TestGate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab and runs targets")
	}
	own := writeOwnService(t)
	for _, tc := range []struct {
		target, cas string
		strict      bool
		want        error
	}{
		{own, "concurrent_duplicate", false, ErrViolations},
		{"effectserver-durable", "concurrent_duplicate", false, nil},
		{"effectserver-volatile", "restart_after_reply", false, nil},
		{"effectserver-volatile", "restart_after_reply", true, ErrViolations},
	} {
		var log bytes.Buffer
		err := Run(context.Background(), Options{Root: "../..", Out: filepath.Join(t.TempDir(), "evidence"), Stores: protocol.Stores,
			Intents: DefaultIntents, Targets: []string{tc.target}, Case: tc.cas, Strict: tc.strict, Stdout: &log, Stderr: &log})
		if !errors.Is(err, tc.want) || (err != nil) != (tc.want != nil) {
			t.Errorf("-target %s -case %s strict %v: %v, want %v\n%s", filepath.Base(tc.target), tc.cas, tc.strict, err, tc.want, log.String())
		}
	}
	sinktest.CheckNoneLeft(t, "own-service")
}

// Ensure -trials runs each case that many times on a target, each on
// fresh state: targets.json holds every trial (the first and its
// further_trials), the manifest records the trials, and the audit sums
// the case up over them (verdicts.json's trials and tally); a case that
// does not run has no trials.
func TestTrials(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab and runs targets")
	}
	own := writeOwnService(t)
	out := filepath.Join(t.TempDir(), "evidence")
	var log bytes.Buffer
	err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: protocol.Stores, Intents: DefaultIntents,
		Targets: []string{own}, Case: "keyed_lost_reply,replicas_lost_reply", Trials: 3, Stdout: &log, Stderr: &log})
	if err != nil {
		t.Fatalf("runner -trials 3: %v\n%s", err, log.String())
	}
	read := func(name string, v any) { readEvidence(t, out, name, v) }
	var targets struct {
		Targets []struct {
			Runs []struct {
				Case    string `json:"case"`
				Further []struct {
					Counter int64       `json:"counter"`
					Detail  trialDetail `json:"detail"`
				} `json:"further_trials"`
				Detail *trialDetail `json:"detail"`
			} `json:"runs"`
		} `json:"targets"`
	}
	read("targets.json", &targets)
	var manifest struct {
		Flags map[string]string `json:"flags"`
	}
	read("manifest.json", &manifest)
	var verdicts struct {
		Targets []struct {
			Runs []struct {
				Case   string         `json:"case"`
				Trials int            `json:"trials"`
				Tally  map[string]int `json:"tally"`
			} `json:"runs"`
		} `json:"targets"`
	}
	read("verdicts.json", &verdicts)

	if manifest.Flags["trials"] != "3" {
		t.Errorf("manifest.flags = %v, want trials 3", manifest.Flags)
	}
	runs := targets.Targets[0].Runs
	if len(runs) != 2 || len(runs[0].Further) != 2 || len(runs[1].Further) != 0 {
		t.Fatalf("targets.json: %d runs, further trials %d and %d; want keyed_lost_reply with 2 further trials, replicas_lost_reply (not run) with none",
			len(runs), len(runs[0].Further), len(runs[1].Further))
	}
	// keyed_lost_reply needs no process of its own: its trials share one
	// (docs/targets.md, Shared processes), each with keys of its own.
	trials := []trialDetail{*runs[0].Detail}
	for _, f := range runs[0].Further {
		trials = append(trials, f.Detail)
	}
	prefixes := map[string]bool{}
	for i, d := range trials {
		if d.Shared == nil || len(d.Processes) != 0 || d.KeyPrefix == "" {
			t.Errorf("trial %d: shared process %+v, %d processes of its own, key prefix %q: want a shared process, none of its own, a prefix", i+1, d.Shared, len(d.Processes), d.KeyPrefix)
			continue
		}
		prefixes[d.KeyPrefix] = true
	}
	if len(prefixes) != 3 {
		t.Errorf("the 3 trials drew %d key prefixes, want one each: fresh keys", len(prefixes))
	}
	v := verdicts.Targets[0].Runs[0]
	if v.Case != "keyed_lost_reply" || v.Trials != 3 || v.Tally["pass"] != 3 {
		t.Errorf("verdicts.json: %+v, want keyed_lost_reply passing in 3 of 3 trials", v)
	}
	if strings.Count(log.String(), "keyed_lost_reply") == 0 || !strings.Contains(log.String(), "effects applied=1,1,1 in 3 trials") {
		t.Errorf("the runner's line for the case does not show its 3 trials:\n%s", log.String())
	}
	sinktest.CheckNoneLeft(t, "own-service")
}

// trialDetail is what TestTrials reads of a trial's detail.
type trialDetail struct {
	Processes []struct {
		PID int `json:"pid"`
	} `json:"processes"`
	Shared *struct {
		PID  int `json:"pid"`
		Runs int `json:"runs"`
	} `json:"shared_process"`
	KeyPrefix string `json:"key_prefix"`
}

// Ensure a fault the lab placed at the effect sink that did not fire is
// never judged as the target's doing: a service that wraps the payment in
// another body before it calls the sink never meets crash_after_effect's
// crash (armed for the client's body), and the case, which without the
// rule read "limitation duplicate_effect" though nothing crashed, is not
// judged, with why, in every trial; a case that places no sink fault is
// judged as before, and the exchanges and the sink's records say what
// was armed and what fired.
func TestFaultNotFired(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lab and runs targets")
	}
	own := writeOwnService(t, `"text/plain", bytes.NewReader(body)`, `"application/json", bytes.NewReader(append(append([]byte(`+"`"+`{"payment":`+"`"+`), body...), '}'))`)
	out := filepath.Join(t.TempDir(), "evidence")
	var log bytes.Buffer
	err := Run(context.Background(), Options{Root: "../..", Out: out, Stores: protocol.Stores, Intents: DefaultIntents,
		Targets: []string{own}, Case: "keyed_lost_reply,crash_after_effect", Trials: 2, Stdout: &log, Stderr: &log})
	if err != nil {
		t.Fatalf("runner: %v\n%s", err, log.String())
	}
	var verdicts struct {
		Targets []struct {
			Runs []struct {
				Case        string   `json:"case"`
				NotRun      string   `json:"not_run"`
				Safety      string   `json:"safety"`
				Trials      int      `json:"trials"`
				TrialSafety []string `json:"trial_safety"`
				NotFired    int      `json:"not_fired"`
			} `json:"runs"`
		} `json:"targets"`
	}
	readEvidence(t, out, "verdicts.json", &verdicts)
	got := map[string]string{}
	for _, r := range verdicts.Targets[0].Runs {
		got[r.Case] = fmt.Sprintf("%s|%s|%d|%v|%d", r.Safety, r.NotRun, r.Trials, r.TrialSafety, r.NotFired)
	}
	want := map[string]string{
		"keyed_lost_reply": "pass||2|[pass pass]|0",
		"crash_after_effect": `|not judged: in none of 2 trials did the fault it places fire (fault "crash-after-effect", armed at the effect sink, did not fire: ` +
			`no call of the target to the sink carried the client's body (the sink saw 2 calls))|0|[not_fired not_fired]|2`,
	}
	for c, w := range want {
		if got[c] != w {
			t.Errorf("%s: %s\nwant %s", c, got[c], w)
		}
	}
	var targets struct {
		Targets []struct {
			Runs []struct {
				Case   string `json:"case"`
				Detail struct {
					Exchanges []struct {
						Fault     string `json:"fault"`
						SinkArmed bool   `json:"sink_armed"`
						SinkFired bool   `json:"sink_fired"`
					} `json:"exchanges"`
					SinkCalls []struct {
						Armed bool `json:"armed"`
					} `json:"sink_calls"`
				} `json:"detail"`
			} `json:"runs"`
		} `json:"targets"`
	}
	readEvidence(t, out, "targets.json", &targets)
	for _, r := range targets.Targets[0].Runs {
		if r.Case != "crash_after_effect" {
			continue
		}
		x := r.Detail.Exchanges[0]
		if x.Fault != "crash-after-effect" || !x.SinkArmed || x.SinkFired || len(r.Detail.SinkCalls) != 2 || r.Detail.SinkCalls[0].Armed {
			t.Errorf("targets.json: crash_after_effect's first exchange %+v, sink calls %+v: want the fault armed, not fired, and no sink call armed", x, r.Detail.SinkCalls)
		}
	}
	if t.Failed() {
		// Once in a loaded go test ./... (2026-12-03) a trial's sink saw 3
		// calls, and once (2026-12-04) keyed_lost_reply's trial got the
		// value of another run's sink: a shared process was started on a
		// port another run's target had just been given, and its readiness
		// probe reached that target (serverproc.FreePort, PortTakenError).
		// Keep what the lab recorded of every trial of the case all the
		// same, should another cause show.
		logCaseDetail(t, out, "crash_after_effect")
	}
	sinktest.CheckNoneLeft(t, "own-service")
}

// logCaseDetail logs, for each trial of case cs on the first target in
// targets.json of folder out, its calls, exit codes and detail (the
// proxy's exchanges and the sink's calls) as recorded.
func logCaseDetail(t *testing.T, out, cs string) {
	t.Helper()
	var doc struct {
		Targets []struct {
			Runs []struct {
				Case          string            `json:"case"`
				Calls         json.RawMessage   `json:"calls"`
				ExitCodes     json.RawMessage   `json:"exit_codes"`
				Detail        json.RawMessage   `json:"detail"`
				FurtherTrials []json.RawMessage `json:"further_trials"`
			} `json:"runs"`
		} `json:"targets"`
	}
	readEvidence(t, out, "targets.json", &doc)
	for _, r := range doc.Targets[0].Runs {
		if r.Case != cs {
			continue
		}
		t.Logf("%s, trial 1: calls %s, exit codes %s, detail %s", cs, r.Calls, r.ExitCodes, r.Detail)
		for i, ft := range r.FurtherTrials {
			t.Logf("%s, trial %d: %s", cs, i+2, ft)
		}
	}
}

// readEvidence decodes the evidence file name of folder out into v.
func readEvidence(t *testing.T, out, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

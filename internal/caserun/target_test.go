package caserun

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/protocol"
	"idemlab/internal/schemacheck"
	"idemlab/internal/serverproc"
	"idemlab/internal/target"
)

// tinyEnv makes this test binary a tiny idempotent service: a target the
// lab did not write, with an in-memory key table and its effect at the
// sink. Its value says which flaw it has ("" none).
const tinyEnv = "CASERUN_TINY_TARGET"

// tinyMain serves POST /pay on PORT: a new key's handler POSTs the body to
// EFFECT_URL and records the sink's answer; a known key replays it (marked
// X-Replayed: yes); a key in flight gets 409. With the flaw "check-then-set"
// the in-flight mark is set only after the effect, so concurrent
// duplicates each apply it. A failed effect leaves the key in flight with
// the flaw "stuck-on-failure", and frees it otherwise.
func tinyMain(flaw string) {
	type entry struct {
		done  bool
		value string
	}
	var mu sync.Mutex
	keys := map[string]*entry{}
	http.HandleFunc("/pay", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		e, ok := keys[key]
		switch {
		case key == "":
		case ok && e.done:
			mu.Unlock()
			w.Header().Set("X-Replayed", "yes")
			io.WriteString(w, e.value)
			return
		case ok:
			mu.Unlock()
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
			return
		case flaw != "check-then-set":
			keys[key] = &entry{}
		}
		mu.Unlock()
		resp, err := http.Post(os.Getenv("EFFECT_URL"), "text/plain", strings.NewReader(string(body)))
		var value []byte
		if err == nil {
			value, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil || resp.StatusCode != 200 {
			if flaw != "stuck-on-failure" {
				delete(keys, key)
			}
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if key != "" {
			keys[key] = &entry{done: true, value: string(value)}
		}
		w.Header().Set("X-Replayed", "no")
		w.Write(value)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("tiny ready")
	http.Serve(ln, nil)
}

// tinyTarget writes target.json for the tiny service with flaw into a
// fresh folder and loads it.
func tinyTarget(t *testing.T, flaw string) *target.Target {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`{
  "name": "tiny",
  "summary": "a tiny in-memory idempotent service (this test binary)",
  "start": {"argv": [%q], "env": {"PORT": "{port}", "EFFECT_URL": "{effect_url}", %q: %q}, "ready": {"stdout": "^tiny ready$"}},
  "request": {"path": "/pay", "key_header": "Idempotency-Key"},
  "replay": {"header": "X-Replayed", "value": "yes"},
  "effects": "sink",
  "claims": {"durable": false, "shared_store": false, "capacity": null, "max_body": null}
}`, os.Args[0], tinyEnv, flaw)
	if err := os.WriteFile(filepath.Join(dir, target.FileName), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := schemacheck.Load(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := target.Load(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func loadCase(t *testing.T, name string) casefile.Case {
	t.Helper()
	set, err := schemacheck.Load(filepath.Join("..", "..", "schema"))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := casefile.LoadDir(filepath.Join("..", "..", "cases"), set)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %s", name)
	return casefile.Case{}
}

// summary is a run's observations on one line: the effects, the exit
// codes, then each call as status/body/replayed or its outcome.
func summary(counter int64, codes []int, calls []string) string {
	return fmt.Sprintf("%d %v %s", counter, codes, strings.Join(calls, " "))
}

// Ensure the cases run on a target the lab did not write, with each fault
// placed on the proxy or the sink, and the effects counted by the sink:
// what comes back is what that target really does.
func TestRunTarget(t *testing.T) {
	for _, tc := range []struct {
		cas, flaw, want string
	}{
		// The proxy drops the reply after the target recorded the key: the
		// retry replays.
		{"keyed_lost_reply", "", "1 [143] no_reply 200/1/true"},
		// The sink applies, then kills the target (the crash gap): it
		// restarts with an empty table and applies again.
		{"crash_after_effect", "", "2 [137 143] no_reply 200/2/false"},
		// The proxy holds the reply, kills the target, drops the reply.
		{"crash_after_record", "", "2 [137 143] no_reply 200/2/false"},
		// The sink kills the target on receipt: nothing applied.
		{"crash_before_effect", "", "1 [137 143] no_reply 200/1/false"},
		// The sink stalls the owner: the duplicates find it in flight.
		{"concurrent_duplicate", "", "1 [143] 200/1/false " + strings.Repeat("409/-/null ", 10) + "409/-/null"},
		// With the in-flight mark set after the effect, every duplicate applies.
		{"concurrent_duplicate", "check-then-set", "12 [143] " + strings.TrimSpace(strings.Repeat("200/?/false ", 12))},
	} {
		t.Run(tc.cas+"/"+tc.flaw, func(t *testing.T) {
			tg := tinyTarget(t, tc.flaw)
			cfg := TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: 10 * time.Second}
			before, _ := serverproc.ProcessesMentioning(tinyEnv)
			obs, det, err := RunTarget(context.Background(), cfg, loadCase(t, tc.cas))
			if err != nil {
				t.Fatal(err)
			}
			var calls []string
			for _, c := range obs.Calls {
				if c.Outcome != protocol.OutcomeReply {
					calls = append(calls, string(c.Outcome))
					continue
				}
				body := "-"
				if c.Body != nil && *c.Body != "" {
					body = *c.Body
					if tc.flaw == "check-then-set" {
						body = "?" // which duplicate got which value is a race
					}
				}
				r := "null"
				if c.Replayed != nil {
					r = fmt.Sprint(*c.Replayed)
				}
				calls = append(calls, fmt.Sprintf("%d/%s/%s", *c.Status, body, r))
			}
			if got := summary(obs.Counter, obs.ExitCodes, calls); got != strings.TrimSpace(tc.want) {
				t.Fatalf("observed %s\nwant     %s\nlog: %q", got, tc.want, det.ServerLog)
			}
			if got := int64(len(det.Journal)); got != obs.Counter {
				t.Fatalf("journal holds %d effects, counter says %d", got, obs.Counter)
			}
			after, _ := serverproc.ProcessesMentioning(tinyEnv)
			if len(after) > len(before) {
				t.Fatalf("target processes left after the run: %v (before: %v)", after, before)
			}
		})
	}
}

// Ensure a target that never gets ready is killed with its group, and the
// run says why.
func TestRunTargetNeverReady(t *testing.T) {
	tg := tinyTarget(t, "")
	tg.Start.ReadyLine = regexp.MustCompile("^a line it never prints$")
	tg.Start.ReadyWithin = 300 * time.Millisecond
	before, _ := serverproc.ProcessesMentioning(tinyEnv)
	_, _, err := RunTarget(context.Background(), TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: time.Second}, loadCase(t, "keyed_lost_reply"))
	if err == nil || !strings.Contains(err.Error(), "not ready within") {
		t.Fatalf("RunTarget = %v, want a readiness failure", err)
	}
	if after, _ := serverproc.ProcessesMentioning(tinyEnv); len(after) > len(before) {
		t.Fatalf("target processes left: %v", after)
	}
}

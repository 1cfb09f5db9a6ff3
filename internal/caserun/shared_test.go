package caserun

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"idemlab/internal/casefile"
	"idemlab/internal/sink"
	"idemlab/internal/sink/sinktest"
	"idemlab/internal/target"
)

// Ensure exactly the cases that neither restart, stop nor crash a process,
// run one replica and set no capacity or TTL of their own share a process,
// and only on a target the lab starts, that calls the sink and claims no
// capacity (worked by hand from cases/).
func TestShareable(t *testing.T) {
	cases := loadCases(t)
	memory := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.Memory})
	capped := *memory
	capped.Claims.Capacity = new(64)
	counting := *memory
	counting.Effects.Sink = false
	attached := *memory
	attached.Attach = &target.Attach{Upstream: "127.0.0.1:1", SinkAddr: "127.0.0.1:2"}
	one := []string{
		"unkeyed_lost_reply", "keyed_lost_reply", "concurrent_duplicate", "body_conflict", "body_conflict_no_content_type",
		"effect_fails_then_retry", "fails_after_effect_then_retry", "client_gives_up_owner_running",
		"capacity_and_input", // its 429 needs a capacity claim, which no shared target has: never run shared
		"oversized_key_and_body", "downstream_ledger_reply_dropped",
	}
	for _, tc := range []struct {
		name string
		tg   *target.Target
		want []string
	}{
		{"a sink target", memory, one},
		{"a target claiming a capacity", &capped, nil},
		{"a target counting its effects", &counting, nil},
		{"an attached target", &attached, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range cases {
				if Shareable(c, tc.tg) {
					got = append(got, c.Name)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("shareable: %q\nwant        %q", got, tc.want)
			}
		})
	}
}

// Ensure runs on a pool share its process and keep apart what a fresh
// process would: each observes what it observes on a process of its own,
// draws its own key prefix, has a journal of its own effects; a process
// that died between runs is replaced, its exit recorded; the process's
// effect URL outlives the runs and closes every call's connection; Close
// ends every process and records its exit and its runs.
func TestRunTargetShared(t *testing.T) {
	tg := sinktest.LoadTarget(t, sinktest.Service{Keys: sinktest.Memory})
	cfg := TargetConfig{Target: tg, StateRoot: t.TempDir(), ClientTimeout: 10 * time.Second}
	pool := NewPool(context.Background(), cfg)
	defer pool.Close()
	cfg.Pool = pool
	lost := loadCase(t, "keyed_lost_reply")

	type result struct {
		obs Observed
		det TargetDetail
	}
	run := func(c casefile.Case) result {
		t.Helper()
		obs, det, err := RunTarget(context.Background(), cfg, c)
		if err != nil {
			t.Fatal(err)
		}
		return result{obs, det}
	}
	check := func(r result, wantShared bool) {
		t.Helper()
		if (r.det.Shared != nil) != wantShared {
			t.Fatalf("shared process %+v, want shared %v", r.det.Shared, wantShared)
		}
		wantCodes := []int{143}
		if wantShared {
			wantCodes = []int{}
		}
		if !slices.Equal(r.obs.ExitCodes, wantCodes) || r.obs.Counter != 1 || len(sink.Effects(r.det.Journal)) != 1 || sink.Effects(r.det.Journal)[0].Seq != 1 {
			t.Fatalf("exit codes %v, counter %d, journal %+v: want %v, one effect of value 1 in the run's own journal", r.obs.ExitCodes, r.obs.Counter, r.det.Journal, wantCodes)
		}
		if c := r.obs.Calls[1]; *c.Status != 200 || *c.Body != "1" || c.Replayed == nil || !*c.Replayed {
			t.Fatalf("the retry: %+v, want a replay of effect 1", c)
		}
		if wantShared && (r.det.KeyPrefix == "" || *r.obs.Calls[0].Key != tg.Request.KeyFormat.Key(r.det.KeyPrefix+"same")) {
			t.Fatalf("key prefix %q, key sent %q: want every key sent with the run's prefix", r.det.KeyPrefix, *r.obs.Calls[0].Key)
		}
	}

	first, second := run(lost), run(lost)
	check(first, true)
	check(second, true)
	if first.det.Shared != second.det.Shared || first.det.KeyPrefix == second.det.KeyPrefix {
		t.Fatalf("two runs: processes %p and %p, prefixes %q and %q: want one process, two prefixes", first.det.Shared, second.det.Shared, first.det.KeyPrefix, second.det.KeyPrefix)
	}
	if r := run(loadCase(t, "restart_after_reply")); r.det.Shared != nil || len(r.obs.ExitCodes) != 2 {
		t.Fatalf("restart_after_reply: shared %+v, exit codes %v: want processes of its own", r.det.Shared, r.obs.ExitCodes)
	}

	// The process dies between two runs: the next run starts another.
	dead := first.det.Shared
	syscall.Kill(dead.PID, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for !pool.all[0].proc.Exited() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	third := run(lost)
	check(third, true)
	if third.det.Shared == dead || dead.ExitCode != 137 || dead.Runs != 2 {
		t.Fatalf("after a kill: process %+v, the dead one %+v: want another, the dead one's exit 137 after 2 runs", third.det.Shared, dead)
	}

	// The process's effect URL outlives the runs: between runs a call is
	// answered 503, and every call closes its connection (a process keeps
	// none from one run to the next); a call the sink ends unanswered ends
	// the process's connection unanswered too.
	m := pool.all[1]
	post := func() (int, error) {
		t.Helper()
		conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(m.relay.url, "/effect/0"), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /effect/0 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !resp.Close {
			t.Errorf("the relay's answer %d keeps the connection open: want Connection: close", resp.StatusCode)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("after the answer the connection gave %v, want EOF (closed)", err)
		}
		return resp.StatusCode, nil
	}
	if code, err := post(); code != http.StatusServiceUnavailable {
		t.Fatalf("a call between runs: %d (%v), want 503", code, err)
	}
	fourth := run(lost)
	check(fourth, true)
	if fourth.det.Shared != third.det.Shared {
		t.Fatalf("fourth run on %+v, want the third's process %+v", fourth.det.Shared, third.det.Shared)
	}
	m.relay.point("http://" + "127.0.0.1:1/effect/0") // a sink that is gone: the call ends unanswered
	if code, err := post(); err == nil {
		t.Fatalf("a call the sink ended unanswered was answered %d by the relay", code)
	}
	m.relay.point("")

	pool.Close()
	if rec := third.det.Shared; rec.ExitCode != 143 || rec.Runs != 2 {
		t.Fatalf("after Close: %+v, want exit 143 at SIGTERM after 2 runs", rec)
	}
	if left := sinktest.Leftovers(); len(left) > 0 {
		t.Fatalf("target processes left after Close: %v", left)
	}
}

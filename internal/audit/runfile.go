package audit

import (
	"fmt"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// checkRunFile checks run.json against results.json: the same runs in the
// same order, then each run's servers, log, calls and clients.
func (a *auditor) checkRunFile(results map[string]any) {
	doc := a.runDoc
	if doc == nil {
		return // reported by the schema check
	}
	a.claim("runfile")
	a.checkRunTimes(doc)
	rruns, _ := results["runs"].([]any)
	druns, _ := doc["runs"].([]any)
	a.check()
	rk, dk := runKeyNames(rruns), runKeyNames(druns)
	if !slices.Equal(rk, dk) {
		a.runFileFail(nil, "runs: expected the runs of results.json in its order (%d runs), observed %d runs: %s", len(rk), len(dk), firstDiffOf("runs", rk, dk))
	}
	for i := range min(len(rruns), len(druns)) {
		if k := runKeyOf(rruns[i]); runKeyOf(druns[i]) == k {
			rr, _ := rruns[i].(map[string]any)
			dr, _ := druns[i].(map[string]any)
			a.checkRunEntry(k, rr, dr)
		}
	}
}

func runKeyOf(v any) runKey {
	m, _ := v.(map[string]any)
	c, _ := str(m, "case")
	s, _ := str(m, "store")
	return runKey{c, s}
}

// runKeyNames names the runs of a runs array, in order.
func runKeyNames(runs []any) []string {
	var out []string
	for _, r := range runs {
		out = append(out, runKeyOf(r).String())
	}
	return out
}

// runFileFail records a failed run.json check, about run k unless nil.
func (a *auditor) runFileFail(k *runKey, format string, args ...any) {
	f := Failure{Check: CheckRunFile, Message: "run.json: " + fmt.Sprintf(format, args...)}
	if k != nil {
		f.Case, f.Store = k.Case, k.Store
		f.Message = fmt.Sprintf("run.json: %s: %s", k, fmt.Sprintf(format, args...))
	}
	a.fail(f)
}

// checkRunTimes checks run.json's started_utc (and manifest.json's
// generated_utc against it) and wall_ms.
func (a *auditor) checkRunTimes(doc map[string]any) {
	a.check()
	started, _ := str(doc, "started_utc")
	if !validTime(started) {
		a.runFileFail(nil, "started_utc: %q is not an RFC 3339 time", started)
	} else if gen, ok := str(a.manifest, "generated_utc"); ok && validTime(gen) {
		// The manifest is written after the runs began, and a run that
		// takes over an hour is not this lab's.
		s, _ := time.Parse(time.RFC3339Nano, started)
		g, _ := time.Parse(time.RFC3339Nano, gen)
		if g.Before(s.Truncate(time.Second)) || g.After(s.Add(time.Hour)) {
			a.fail(Failure{Check: CheckManifest, Field: "generated_utc",
				Message: fmt.Sprintf("manifest.json: generated_utc: %s, not within the hour after run.json's started_utc %s", gen, started)})
		}
	}
	a.check()
	a.saneField(nil, "wall_ms", doc["wall_ms"])
}

// saneField records a failed run.json check unless v, field's value, is
// a finite non-negative number.
func (a *auditor) saneField(k *runKey, field string, v any) {
	if !sane(v) {
		a.runFileFail(k, "%s: %s is not a non-negative number", field, render(v))
	}
}

// checkRunEntry checks run k of run.json (dr) against results.json's (rr):
// one server per exit code, each equal, on loopback, ready and logging as
// itself; one call per call, an error text exactly on those without a
// reply; durations finite and non-negative.
func (a *auditor) checkRunEntry(k runKey, rr, dr map[string]any) {
	a.check()
	a.saneField(&k, "wall_ms", dr["wall_ms"])
	servers, _ := dr["servers"].([]any)
	codes, _ := rr["exit_codes"].([]any)
	var got []any
	for j, sv := range servers {
		m, _ := sv.(map[string]any)
		got = append(got, m["exit_code"])
		a.check()
		a.saneField(&k, fmt.Sprintf("servers[%d].ready_ms", j), m["ready_ms"])
		if number(m["pid"]) <= 0 {
			a.runFileFail(&k, "servers[%d].pid: %s is not a process id", j, render(m["pid"]))
		}
		if addr, _ := str(m, "addr"); !loopback(addr) {
			a.runFileFail(&k, "servers[%d].addr: %q is not a loopback host:port", j, addr)
		}
	}
	a.check()
	if render(got) != render(codes) && !(len(got) == 0 && len(codes) == 0) {
		a.runFileFail(&k, "servers' exit codes: expected %s (results.json exit_codes), observed %s", render(codes), render(got))
	}
	a.check()
	for j, line := range stringList(dr, "server_log") {
		if strings.HasPrefix(line, "ledger: ") {
			continue // the downstream ledger's own log
		}
		if n, ok := logServer(line); !ok || n >= len(servers) {
			a.runFileFail(&k, "server_log[%d]: does not start with \"server N\" for one of the %d servers", j, len(servers))
			break
		}
	}
	rcalls, _ := rr["calls"].([]any)
	dcalls, _ := dr["calls"].([]any)
	a.check()
	if len(rcalls) != len(dcalls) {
		a.runFileFail(&k, "calls: expected %d (as in results.json), observed %d", len(rcalls), len(dcalls))
		return
	}
	for j := range dcalls {
		dc, _ := dcalls[j].(map[string]any)
		rc, _ := rcalls[j].(map[string]any)
		a.check()
		a.saneField(&k, fmt.Sprintf("calls[%d].latency_ms", j), dc["latency_ms"])
		outcome, _ := str(rc, "outcome")
		if e, _ := str(dc, "error"); (e == "") != (outcome == "reply") {
			a.runFileFail(&k, "calls[%d].error: %q for outcome %s (an error text exactly when no reply came)", j, e, outcome)
		}
	}
	i := slices.IndexFunc(a.allCases, func(c *Case) bool { return c.Name == k.Case })
	if i >= 0 && len(a.allCases[i].Plan) == len(dcalls) { // else reported by the call checks
		a.checkClients(k, a.allCases[i].Plan, rcalls, dcalls)
	}
}

// checkClients checks the client launch indexes of one run's calls: in
// each concurrent group a permutation of 0..clients-1, lone calls client
// 0, a parallel step's calls in list order, and equal observations in
// launch order (the owner, the call not replayed, comes first wherever it
// was launched).
func (a *auditor) checkClients(k runKey, plan []PlannedCall, rcalls, dcalls []any) {
	for j := 0; j < len(plan); {
		end := j + 1
		for plan[j].Group >= 0 && end < len(plan) && plan[end].Group == plan[j].Group {
			end++
		}
		a.check()
		var clients []int64
		for x := j; x < end; x++ {
			m, _ := dcalls[x].(map[string]any)
			clients = append(clients, number(m["client"]))
		}
		sorted := slices.Sorted(slices.Values(clients))
		perm := true
		for x, c := range sorted {
			perm = perm && c == int64(x)
		}
		switch {
		case plan[j].Ordered:
			for x, c := range clients {
				if c != int64(x) {
					a.runFileFail(&k, "calls[%d].client: expected %d (the call's place in its parallel step), observed %d", j+x, x, c)
					break
				}
			}
		case !perm && end-j == 1:
			a.runFileFail(&k, "calls[%d].client: expected 0 (a lone call), observed %d", j, clients[0])
		case !perm:
			a.runFileFail(&k, "calls[%d..%d].client: expected the launch indexes 0..%d once each, observed %s", j, end-1, end-j-1, render(clients))
		default:
			for x := j + 1; x < end; x++ {
				if render(rcalls[x]) == render(rcalls[x-1]) && clients[x-j] < clients[x-j-1] {
					a.runFileFail(&k, "calls[%d].client: %d after %d for an equal observation (equal calls keep launch order; the owner, not replayed, comes first)", x, clients[x-j], clients[x-j-1])
					break
				}
			}
		}
		j = end
	}
}

var logPrefix = regexp.MustCompile(`^server ([0-9]{1,4})[: ]`)

// logServer returns the N of a "server N: ..." or "server N (...)" line.
func logServer(line string) (int, bool) {
	m := logPrefix.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

func validTime(s string) bool {
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// sane reports whether v is a finite non-negative JSON number.
func sane(v any) bool {
	n, ok := v.(interface{ Float64() (float64, error) })
	if !ok {
		return false
	}
	f, err := n.Float64()
	return err == nil && f >= 0 && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// loopback reports whether addr is a loopback IP and a port.
func loopback(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || strings.TrimLeft(port, "0123456789") != "" {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// firstDiffOf names the first position where two lists called what differ.
func firstDiffOf(what string, want, got []string) string {
	for i := range max(len(want), len(got)) {
		var w, g = "(none)", "(none)"
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			return fmt.Sprintf("%s[%d] is %s, want %s", what, i, g, w)
		}
	}
	return "same " + what
}

package audit

import (
	"encoding/json"
	"fmt"
	"go/constant"
	"regexp"
	"slices"
	"strings"
)

// The server's fixed reply texts (the audit's own copy): a reply with one
// of these statuses carries one of them (400 and 413: expectedReply).
var fixedReplies = map[int][]string{
	404: {"not found\n"},
	405: {"method not allowed\n"},
	409: {"request with this Idempotency-Key is still in progress\n",
		"request with this Idempotency-Key is claimed by another request until its lease ends; retry after Retry-After seconds\n",
		"request with this Idempotency-Key was taken over by another request after this one's lease ended\n"},
	422: {"Idempotency-Key already used with another request body\n"},
	429: {"Idempotency-Key registry is full\n"},
	500: {"effect failed\n"},
	503: {"request canceled while waiting\n", "store unavailable; nothing was recorded, retry\n"},
}

// downstreamFailed is the 502 of a failed downstream (ledger) call.
var downstreamFailed = regexp.MustCompile(`^downstream call failed: [a-z_ ]{1,40}\n$`)

// Header names as the server writes them in its 400 replies.
const (
	keyHeader   = "Idempotency-Key"
	faultHeader = "X-Lab-Fault"
)

// keyError is the audit's own reading of the key syntax (keyPattern, bare
// or in double quotes): the server's error text, "" for a good key.
func keyError(v string) string {
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "unbalanced quote"
		}
		v = v[1 : len(v)-1]
	}
	switch {
	case v == "":
		return "empty key"
	case strings.Contains(v, `"`):
		return "unbalanced quote"
	case len(v) > 64:
		return "key longer than 64 characters"
	case !keyToken.MatchString(v):
		return "key has a character outside [A-Za-z0-9_-]"
	}
	return ""
}

// keyPattern is the key syntax as the manifest records it.
const keyPattern = "[A-Za-z0-9_-]{1,64}"

var keyToken = regexp.MustCompile(`^` + keyPattern + `$`)

// faultPoints are the lab faults and the point each acts at: a value joins
// faults with ",", at most one per point; "delay" and "stall" take "=NNms"
// (0 to 60000), the others no argument.
var faultPoints = map[string]int{
	"delay": 0, "slow": 0, "stall": 1,
	"crash-before-effect": 2, "crash-after-effect": 2, "crash-after-record": 2,
	"fail-effect": 2, "fail-after-effect": 2,
	"crash-after-claim": 2, "crash-after-downstream": 2,
	"drop-reply": 3, "drop-downstream-reply": 4,
}

var msArg = regexp.MustCompile(`^[0-9]{1,5}ms$`)

// faultError is the audit's own reading of an X-Lab-Fault value: the
// server's error text, "" for a good fault.
func faultError(v string) string {
	if v == "" {
		return "empty fault"
	}
	taken := map[int]bool{}
	for _, part := range strings.Split(v, ",") {
		if part == "" {
			return "empty fault"
		}
		name, arg, hasArg := strings.Cut(part, "=")
		point, known := faultPoints[name]
		switch {
		case !known:
			return fmt.Sprintf("unknown fault %q", name)
		case name == "delay" || name == "stall":
			if !hasArg || !msArg.MatchString(arg) || number(json.Number(strings.TrimSuffix(arg, "ms"))) > 60000 {
				return fmt.Sprintf("bad fault argument %q", part)
			}
		case hasArg:
			return fmt.Sprintf("bad fault argument %q", part)
		}
		if taken[point] {
			return fmt.Sprintf("two faults act at the same point %q", v)
		}
		taken[point] = true
	}
	return ""
}

// crashes reports whether a valid fault value makes the server exit.
func crashes(v *string) bool { return v != nil && faultError(*v) == "" && hasCrash(*v) }

// hasCrash reports whether fault value v holds a crash fault (any part
// "crash-...").
func hasCrash(v string) bool {
	return slices.ContainsFunc(strings.Split(v, ","), func(part string) bool { return strings.HasPrefix(part, "crash-") })
}

// expectedReply is the status and body the server answers a request it
// refuses as such; status 0 when the reply depends on the store.
func expectedReply(p PlannedCall, maxBody int64) (int, string) {
	if p.Fault != nil {
		if e := faultError(*p.Fault); e != "" {
			return 400, faultHeader + ": " + e + "\n"
		}
	}
	if p.Key != nil {
		if e := keyError(*p.Key); e != "" {
			return 400, keyHeader + ": " + e + "\n"
		}
	}
	if int64(p.BodyLen) > maxBody {
		return 413, fmt.Sprintf("request body larger than %d bytes\n", maxBody)
	}
	return 0, ""
}

var decimal = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// checkCalls checks every call of the runs checked in depth against the
// case's steps (checkSent) and every reply against the server's texts.
func (a *auditor) checkCalls(runs map[runKey]map[string]any) {
	maxBody := a.maxBody()
	for _, c := range a.cases {
		for _, s := range a.stores {
			run, ok := runs[runKey{c.Name, s}]
			if !ok {
				continue
			}
			calls, _ := run["calls"].([]any)
			fail := a.callFailer(Failure{Check: CheckCalls, Case: c.Name, Store: s}, fmt.Sprintf("case %s, store %s", c.Name, s))
			a.check()
			if len(calls) != len(c.Plan) {
				fail(nil, "calls", fmt.Sprintf("%d (as %s's steps send)", len(c.Plan), c.File), fmt.Sprint(len(calls)))
			}
			for i := range min(len(calls), len(c.Plan)) {
				call, _ := calls[i].(map[string]any)
				p := c.Plan[i]
				a.check()
				checkSent(i, call, p, fail)
				outcome, _ := str(call, "outcome")
				status, body, replayed := call["status"], call["body"], call["replayed"]
				if outcome != "reply" {
					if status != nil || body != nil || replayed != nil {
						fail(&i, "status, body, replayed", "null, null, null (outcome "+outcome+")", render(status)+", "+render(body)+", "+render(replayed))
					}
					continue
				}
				st := int(number(status))
				b, _ := body.(string)
				if ws, wb := expectedReply(p, maxBody); ws != 0 {
					if st != ws || b != wb || replayed != nil {
						fail(&i, "reply", fmt.Sprintf("%d %s replayed null (the server refuses this request)", ws, render(wb)),
							fmt.Sprintf("%s %s replayed %s", render(status), render(body), render(replayed)))
					}
					continue
				}
				switch texts, fixed := fixedReplies[st]; {
				case st == 502 && downstreamFailed.MatchString(b) && replayed == nil:
				case st == 200:
					if _, isBool := replayed.(bool); !decimal.MatchString(b) || !isBool {
						fail(&i, "reply", "200, a decimal counter, replayed true or false",
							fmt.Sprintf("200 %s replayed %s", render(body), render(replayed)))
					}
				case !fixed || st == 400 || st == 413:
					fail(&i, "status", "a status the server sends for this request", render(status))
				case !slices.Contains(texts, b) || replayed != nil:
					fail(&i, "reply", fmt.Sprintf("%d %s replayed null (the server's text)", st, render(texts[0])),
						fmt.Sprintf("%d %s replayed %s", st, render(body), render(replayed)))
				}
			}
		}
	}
}

// checkSent checks call i of a run against its planned call p: the step,
// key, fault and replica the case's steps send.
func checkSent(i int, call map[string]any, p PlannedCall, fail callFail) {
	for _, f := range []struct {
		name string
		want any
	}{{"step", json.Number(fmt.Sprint(p.Step))}, {"key", strPtr(p.Key)}, {"fault", strPtr(p.Fault)}, {"replica", replicaField(p.Replica)}} {
		if w, g := render(f.want), render(call[f.name]); w != g {
			fail(&i, f.name, w+" (as the case's steps send)", g)
		}
	}
}

// callFail records a failed check of a run's calls (call nil: about the
// whole run).
type callFail func(call *int, field, expected, observed string)

// callFailer returns the callFail of one run (base: the check and the
// run's names; where: the run in the message).
func (a *auditor) callFailer(base Failure, where string) callFail {
	return func(call *int, field, expected, observed string) {
		f := base
		f.Call, f.Field, f.Expected, f.Observed = call, field, clipValue(expected), clipValue(observed)
		at := where
		if call != nil {
			at = fmt.Sprintf("%s, call %d", where, *call)
		}
		f.Message = fmt.Sprintf("%s: %s: expected %s, observed %s", at, field, f.Expected, f.Observed)
		a.fail(f)
	}
}

// maxBody is the server's body limit: the checkout's DefaultMaxBody, or
// manifest.protocol.max_body when that cannot be read.
func (a *auditor) maxBody() int64 {
	if consts, err := readConstants(a.opts.Root, ProtocolDir); err == nil {
		if v, ok := consts["DefaultMaxBody"]; ok {
			if n, exact := constant.Int64Val(v); exact {
				return n
			}
		}
	}
	return a.protoInt("max_body")
}

// checkObservedProtocol checks manifest.protocol's capacity, crash exit
// code and max_body against what the runs show; a constant no run
// exercises is named in a note.
func (a *auditor) checkObservedProtocol(runs map[runKey]map[string]any) {
	var o protocolSeen
	for _, c := range a.cases {
		for _, s := range a.stores {
			if run, ok := runs[runKey{c.Name, s}]; ok {
				calls, _ := run["calls"].([]any)
				a.observeReplies(c, runKey{c.Name, s}, calls, &o)
				a.observeCrashes(c, runKey{c.Name, s}, run, calls, &o)
			}
		}
	}
	a.check()
	if o.bodyWrong != "" {
		a.fail(Failure{Check: CheckManifest, Field: "protocol.max_body",
			Message: fmt.Sprintf("manifest.json: protocol.max_body: %d, but %s", a.protoInt("max_body"), o.bodyWrong)})
	}
	for _, x := range []struct {
		saw  bool
		what string
	}{{o.full, "capacity (no run got a 429)"}, {o.crash, "crash_exit_code (no run sent a crash fault)"}, {o.big, "max_body (no call sent a larger body)"}} {
		if !x.saw {
			a.note("manifest.json: protocol." + x.what + ": not observed in the runs checked")
		}
	}
}

// protocolSeen is what the runs exercised of the protocol constants, and
// the first call whose reply contradicts max_body.
type protocolSeen struct {
	full, crash, big bool
	bodyWrong        string
}

// observeReplies checks one run's replies: capacity (or the case's own)
// is the number of distinct keys accepted before the first 429 (unless
// keys expire); a body over max_body, and no other, got 413.
func (a *auditor) observeReplies(c *Case, k runKey, calls []any, o *protocolSeen) {
	capacity, maxBody := a.protoInt("capacity"), a.protoInt("max_body")
	accepted, full := map[string]bool{}, false
	for i := range min(len(calls), len(c.Plan)) {
		call, _ := calls[i].(map[string]any)
		st := number(call["status"])
		big := int64(c.Plan[i].BodyLen) > maxBody
		o.big = o.big || big
		if reply, _ := str(call, "outcome"); reply == "reply" && big != (st == 413) && o.bodyWrong == "" {
			o.bodyWrong = fmt.Sprintf("%s, call %d sent %d bytes and got %d", k, i, c.Plan[i].BodyLen, st)
		}
		if key, _ := str(call, "key"); st == 200 && call["key"] != nil && !full {
			accepted[key] = true
		}
		if st != 429 || full || c.KeyTTL != 0 {
			continue
		}
		o.full, full = true, true
		want := capacity
		if c.Capacity > 0 {
			want = int64(c.Capacity) // the case's -capacity
		}
		a.check()
		if n := int64(len(accepted)); n != want {
			a.fail(Failure{Check: CheckManifest, Case: c.Name, Store: k.Store, Field: "protocol.capacity",
				Expected: fmt.Sprint(n), Observed: fmt.Sprint(want),
				Message: fmt.Sprintf("manifest.json: protocol.capacity: %d, but %s accepted %d distinct keys before its first 429", want, k, n)})
		}
	}
}

// observeCrashes checks one run's exit codes: one per server process the
// steps start; a process that exited with the crash code was sent a crash
// fault, and one that was sent a crash fault and gave no reply (the fault
// fired: a replay fires none) exited with it.
func (a *auditor) observeCrashes(c *Case, k runKey, run map[string]any, calls []any, o *protocolSeen) {
	crash := a.protoInt("crash_exit_code")
	codes, _ := run["exit_codes"].([]any)
	a.check()
	if len(codes) != c.Lifetimes {
		a.fail(Failure{Check: CheckCalls, Case: c.Name, Store: k.Store, Field: "exit_codes",
			Message: fmt.Sprintf("%s: exit_codes: expected %d (one per server process the steps start), observed %d", k, c.Lifetimes, len(codes))})
		return
	}
	may, must := map[int]bool{}, map[int]bool{}
	for i, p := range c.Plan {
		if !crashes(p.Fault) {
			continue
		}
		o.crash = true
		may[p.Process] = true
		for _, m := range p.Maybe {
			may[m] = true
		}
		if i < len(calls) && p.Process >= 0 {
			if call, _ := calls[i].(map[string]any); call["outcome"] == "no_reply" {
				must[p.Process] = true
			}
		}
	}
	for l, code := range codes {
		got := number(code)
		switch {
		case got == crash && !may[l]:
			a.fail(Failure{Check: CheckManifest, Case: c.Name, Store: k.Store, Field: fmt.Sprintf("exit_codes[%d]", l),
				Message: fmt.Sprintf("%s: exit_codes[%d]: %d, protocol.crash_exit_code, but no crash fault was sent to that server", k, l, got)})
		case got != crash && must[l]:
			a.fail(Failure{Check: CheckManifest, Case: c.Name, Store: k.Store, Field: fmt.Sprintf("exit_codes[%d]", l),
				Message: fmt.Sprintf("%s: exit_codes[%d]: expected %d, protocol.crash_exit_code (a crash fault fired in that server), observed %d", k, l, crash, got)})
		}
	}
}

// protoInt returns manifest.protocol.name as an integer (0 if absent).
func (a *auditor) protoInt(name string) int64 {
	p, _ := a.manifest["protocol"].(map[string]any)
	return number(p[name])
}

func strPtr(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// replicaField is results.json's replica field: absent for replica 0 or -1.
func replicaField(r int) any {
	if r <= 0 {
		return nil
	}
	return json.Number(fmt.Sprint(r))
}

package audit

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"idemlab/internal/audit/uuidv5"
)

// This file is the audit's own reading of a target.json and of which cases
// can run on it (docs/targets.md): where each lab fault acts on a target
// (its own header, the fault proxy, the effect sink) and why a case cannot
// run there.

// targetSpec is what of a target.json the audit's checks depend on.
type targetSpec struct {
	name, summary string
	replay        *[2]string // header and value of the replay marker; nil: none
	keyFormat     string     // request.key_format: "verbatim" or "uuid"
	sink          bool       // effects "sink" or {"sink": ...} (else a count command)
	forwardHeader string     // with sink: the header the target forwards its key in
	journal       bool       // a count command's target names a journal command too (chaos can judge it)
	native        map[string]bool
	durable       bool
	sharedStore   bool
	capacity      *int64
	maxBody       *int64
	keyTTL        *int64   // claims.key_ttl_ms; nil: keys kept
	lock          string   // versions.lock, "" for none
	packages      []string // versions.packages
	mirrors       string   // the store the lab's own server as a target reproduces
	attach        bool     // a service its user started (attach): no process control
}

// readTargetSpec reads target.json strictly and against its schema.
func (s *Schemas) readTargetSpec(data []byte) (*targetSpec, error) {
	v, err := decodeJSON(data, capTargetJSON)
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if lines := validate(s.Target, v); len(lines) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(lines, "; "))
	}
	doc := v.(map[string]any)
	t := &targetSpec{native: map[string]bool{}}
	t.name, _ = str(doc, "name")
	t.summary, _ = str(doc, "summary")
	if r, ok := doc["replay"].(map[string]any); ok {
		h, _ := str(r, "header")
		val, _ := str(r, "value")
		t.replay = &[2]string{h, val}
	}
	request, _ := doc["request"].(map[string]any)
	t.keyFormat, _ = str(request, "key_format")
	t.keyFormat = cmp.Or(t.keyFormat, "verbatim")
	t.sink = doc["effects"] == "sink"
	t.forwardHeader, _ = str(request, "key_header")
	if e, ok := doc["effects"].(map[string]any); ok {
		j, _ := e["journal"].([]any)
		t.journal = len(j) > 0
		if sm, ok := e["sink"].(map[string]any); ok {
			t.sink = true
			if h, ok := str(sm, "key_header"); ok {
				t.forwardHeader = h
			}
		}
	}
	faults, _ := doc["faults"].(map[string]any)
	native, _ := faults["native"].(map[string]any)
	for name := range native {
		if name != allFaults && !slices.Contains(targetFaultNames(), name) {
			return nil, fmt.Errorf("/faults/native: %q is not a lab fault (known: %s)", name, strings.Join(targetFaultNames(), ", "))
		}
		t.native[name] = true
	}
	claims, _ := doc["claims"].(map[string]any)
	t.durable, _ = claims["durable"].(bool)
	t.sharedStore, _ = claims["shared_store"].(bool)
	for key, claim := range map[string]**int64{"capacity": &t.capacity, "max_body": &t.maxBody, "key_ttl_ms": &t.keyTTL} {
		if claims[key] != nil {
			*claim = new(number(claims[key]))
		}
	}
	versions, _ := doc["versions"].(map[string]any)
	t.lock, _ = str(versions, "lock")
	t.packages = stringList(versions, "packages")
	t.mirrors, _ = str(doc, "mirrors")
	t.attach = doc["attach"] != nil
	return t, nil
}

// allFaults, as a faults.native name, maps every lab fault to the target.
const allFaults = "*"

// Where a lab fault acts on a target that does not map it natively.
const (
	atProxy = iota // the fault proxy: drops the reply, or holds it and kills the target
	atSink         // the effect sink: waits, fails, kills the target, drops its reply around the effect
)

// targetFaults are the lab faults a target knows and where each acts; the
// downstream mode's act at the sink, which plays the ledger.
var targetFaults = map[string]int{
	"drop-reply": atProxy, "crash-after-record": atProxy, "give-up": atProxy,
	"slow": atSink, "delay": atSink, "stall": atSink,
	"crash-before-effect": atSink, "crash-after-effect": atSink,
	"fail-effect": atSink, "fail-after-effect": atSink,
	"crash-after-claim": atSink, "crash-after-downstream": atSink, "drop-downstream-reply": atSink,
}

// targetFaultNames lists targetFaults' names, sorted.
func targetFaultNames() []string { return sortedKeys(targetFaults) }

// maxDelayMS is the longest delay=NNms or stall=NNms (protocol.MaxDelay).
const maxDelayMS = 60000

// placeFault says why the X-Lab-Fault value v cannot act on target t ("":
// it can): each fault is the target's own header where t maps it (or "*"),
// else the proxy's or the sink's, which needs a target the sink counts.
func placeFault(v string, t *targetSpec) string {
	if v == "" || t.native[allFaults] {
		return ""
	}
	for _, part := range strings.Split(v, ",") {
		name, arg, hasArg := strings.Cut(part, "=")
		at, known := targetFaults[name]
		switch {
		case !known:
			return fmt.Sprintf("fault %q: unknown (known: %s)", part, strings.Join(targetFaultNames(), ", "))
		case t.native[name]:
			continue // the target's own header: its argument is the target's business
		case name == "delay" || name == "stall" || name == "give-up":
			// NN is what strconv.Atoi reads, at most five characters: the
			// lab's placement reads it so ("+5ms" and "-0ms" too), where
			// faultError reads the server's header, digits only.
			digits, isMS := strings.CutSuffix(arg, "ms")
			n, err := strconv.Atoi(digits)
			if !hasArg || !isMS || err != nil || n < 0 || len(digits) > 5 || n > maxDelayMS {
				return fmt.Sprintf("fault %q: want NNms, 0 to %d", part, maxDelayMS)
			}
		case hasArg:
			return fmt.Sprintf("fault %q: takes no argument", part)
		}
		if at == atSink && !t.sink {
			return fmt.Sprintf("%s acts at the effect sink, and %s counts its effects itself without mapping %s to a header", name, t.name, name)
		}
	}
	return ""
}

// targetNotRun says why case c cannot run on target t ("" when it can),
// by caserun.NotRun's rules read again; capacity is the lab's default.
func targetNotRun(c *Case, t *targetSpec, capacity int64) string {
	switch kept := keptMS(c); {
	case c.Sound == "":
		return "the case file has no target section"
	case t.attach && (c.Replicas > 1 || c.LosesProcess):
		return noProcessControl
	case c.Ledger && !t.sink:
		return "the case's ledger is the effect sink, and the target counts its effects itself"
	case c.KeyTTL > 0 && (t.keyTTL == nil || *t.keyTTL != int64(c.KeyTTL)):
		return fmt.Sprintf("the case needs keys that expire after %d ms; the target claims %s", c.KeyTTL, claimText(t.keyTTL))
	case c.KeyTTL == 0 && t.keyTTL != nil && kept >= *t.keyTTL:
		return fmt.Sprintf("the case expects a key kept %d ms; the target claims key_ttl_ms %d", kept, *t.keyTTL)
	case c.Replicas > 1 && !t.sharedStore:
		return fmt.Sprintf("the case runs %d replicas; the target claims no shared store", c.Replicas)
	}
	needsCapacity := c.Capacity > 0
	if c.Capacity > 0 {
		capacity = int64(c.Capacity)
	}
	for i, e := range soundCalls(c) {
		switch {
		case e.status == 429:
			needsCapacity = true
		case e.status == 413 && t.maxBody != nil && i < len(c.Plan) && *t.maxBody >= int64(c.Plan[i].BodyLen):
			return fmt.Sprintf("the case expects a %d-byte body to be refused; the target claims max_body %d", c.Plan[i].BodyLen, *t.maxBody)
		}
	}
	if needsCapacity && (t.capacity == nil || *t.capacity != capacity) {
		return fmt.Sprintf("the case needs a capacity of %d keys; the target claims %s", capacity, claimText(t.capacity))
	}
	for _, p := range c.Plan {
		if p.Fault == nil {
			continue
		}
		if why := placeFault(*p.Fault, t); why != "" {
			return why
		}
	}
	return ""
}

// noProcessControl is why a case that loses a process, or runs replicas,
// does not run on an attached target.
const noProcessControl = "attached, no process control"

// claimText is a claim in a reason: its value, or "none".
func claimText(v *int64) string {
	if v == nil {
		return "none"
	}
	return strconv.FormatInt(*v, 10)
}

// keptMS is casefile's KeptMS, read again.
func keptMS(c *Case) int64 {
	sound, from, longest := soundCalls(c), map[string]int{}, 0
	for i, p := range c.Plan {
		if i >= len(sound) || p.Key == nil {
			continue
		}
		switch f, seen := from[*p.Key]; {
		case sound[i].replayed == replayedTrue:
			longest = max(longest, p.Slept-f)
		case sound[i].replayed == replayedFalse && success(sound[i].status) || !seen:
			from[*p.Key] = p.Slept
		}
	}
	return int64(longest)
}

// soundCall is one call as the sound store expects it (0, nil: unchecked).
type soundCall struct {
	outcome  string
	status   int64
	body     *string
	replayed int
}

// The expected states of a reply's replay marker.
const (
	replayedUnchecked = iota
	replayedAbsent
	replayedFalse
	replayedTrue
)

// soundCalls returns the calls of c's sound expectation (nil without one).
func soundCalls(c *Case) []soundCall {
	if c.Expect[c.Sound] == nil {
		return nil
	}
	var out []soundCall
	for _, ec := range c.Expect[c.Sound].Calls {
		var sc soundCall
		for _, f := range ec {
			switch f.Name {
			case "outcome":
				sc.outcome, _ = f.Value.(string)
			case "status":
				sc.status = number(f.Value)
			case "body":
				sc.body = opt[string](f.Value)
			case "replayed":
				switch f.Value {
				case nil:
					sc.replayed = replayedAbsent
				case true:
					sc.replayed = replayedTrue
				case false:
					sc.replayed = replayedFalse
				}
			}
		}
		out = append(out, sc)
	}
	return out
}

// sentKey is the key the lab sends a target in key format f for a case's
// key k (nil: none): under "uuid", a key the lab's own server accepts is
// sent as its version 5 UUID in the lab's namespace, any other as written.
func sentKey(k *string, f string) *string {
	if k == nil || f != "uuid" || !keyToken.MatchString(*k) {
		return k
	}
	u := uuidv5.Of(caseKeyNamespace, *k)
	return &u
}

// caseKeyNamespace is the namespace of the case keys' UUIDs: the version 5
// UUID of https://idemlab.invalid/case-key in RFC 9562's URL namespace.
var caseKeyNamespace = uuidv5.Of(uuidv5.URL, "https://idemlab.invalid/case-key")

package audit

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// StoreOrder is the order of runs; other stores sort after, by name.
var StoreOrder = []string{"volatile", "durable", "postgres"}

// Case is one case file: its name and, per store, what must be observed.
type Case struct {
	File      string                  // slash path relative to the root, e.g. cases/20-keyed_lost_reply.json
	Name      string                  // the file's name field
	Summary   string                  // the file's summary field
	Expect    map[string]*Expectation // by store
	Plan      []PlannedCall           // the calls the steps send, in the order results.json records them
	Lifetimes int                     // server processes a run has, in the order their exit codes are recorded
	Capacity  int                     // the case's server.capacity (-capacity), 0 for the lab's
	KeyTTL    int                     // the case's server.key_ttl_ms, 0 when keys never expire
	Replicas  int                     // the servers that run at once (replicas, 1 by default)
	Ledger    bool                    // the case drives a ledger (the lab server's downstream mode)
	SinkKeys  bool                    // on a target the sink, playing the ledger, reads a forwarded key (caserun.SinkReadsKeys)
	// Sound is the target section's store, whose expectation a sound
	// implementation shows (how a run on a target is judged); "" when the
	// file has no target section.
	Sound string
	// Column is the matrix's safety column the case belongs to (its
	// target section's column; "" for none); Tests the rules it tests.
	Column string
	Tests  []string
	// LosesProcess: a step restarts or stops a server, or a call sends a
	// crash fault (a target that keeps its keys in memory forgets them).
	LosesProcess bool
}

// PlannedCall is one call a case's steps send: repeat gives repeat calls
// ({i} and {n} expanded); a concurrent step gives, per repeat, a group of
// clients calls; a parallel step gives its calls as one group.
type PlannedCall struct {
	Step    int     // index of the step in the case file
	Slept   int     // ms the sleep steps before it wait in all
	Key     *string // the Idempotency-Key sent; nil: no header
	Fault   *string // the X-Lab-Fault sent; nil: no header
	BodyLen int     // request body length in bytes
	Group   int     // concurrent group, -1 for a call outside one
	Replica int     // the replica it goes to; -1: a group spread across replicas
	Process int     // which server process answers it, by exit-code order; -1: not known (spread) or none (replica down)
	Maybe   []int   // for a spread group: every process that may answer it
	Ordered bool    // in a parallel step: recorded in list order, not sorted
	// InFlight: the call is one of a concurrent step's duplicates (a
	// parallel step's calls, each its own request, are not).
	InFlight bool
	body     callBody // what the request body is made of (Body)
}

// callBody is a planned call's request body, kept unexpanded: a template
// and its repetition, or a count of 'x' bytes, or neither (the default).
type callBody struct {
	text *string
	rep  int
	xs   int // -1: not body_bytes
}

// Body returns the request body the call sends.
func (p PlannedCall) Body() []byte {
	switch {
	case p.body.xs >= 0:
		return bytes.Repeat([]byte{'x'}, p.body.xs)
	case p.body.text != nil:
		return []byte(expand(*p.body.text, p.body.rep))
	}
	return []byte(defaultBody)
}

// Stores returns the stores the case has an expectation for, in store order.
func (c *Case) Stores() []string {
	return orderStores(sortedKeys(c.Expect))
}

// Expectation is what one run of a case on a store must observe.
type Expectation struct {
	Ledger    any   // the ledger's counter (ledger_counter), nil when the case has no ledger
	Counter   any   // a json.Number
	ExitCodes []any // json.Numbers, exact list
	// Calls are the expected calls after expanding repeat, each the fields
	// the case file gives (in the order of callFields): only they are checked.
	Calls [][]ExpectedField
}

// ExpectedField is one checked field of a call and its decoded value.
type ExpectedField struct {
	Name  string
	Value any
}

// callFields are the fields of an expected call that are compared.
var callFields = []string{"outcome", "status", "body", "replayed"}

var caseFileName = regexp.MustCompile(`^[0-9]{2}-(.+)\.json$`)

// LoadCases reads every *.json file in root/cases; any bad file makes the
// set unreadable, the error listing every problem, a line each.
func LoadCases(root string, s *Schemas) ([]*Case, error) {
	if fi, err := os.Lstat(filepath.Join(root, "cases")); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("cases: %w", errNotRegular)
	}
	entries, err := os.ReadDir(filepath.Join(root, "cases"))
	if err != nil {
		return nil, fmt.Errorf("cases: %w", unwrapPath(err))
	}
	var (
		cases  []*Case
		errs   []error // each case file adds a case or an error
		byName = map[string]string{}
	)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || e.IsDir() {
			continue
		}
		rel := "cases/" + e.Name()
		data, err := readInside(root, rel, CapSource)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rel, unwrapPath(err)))
			continue
		}
		c, err := s.LoadCase(rel, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, ok := byName[c.Name]; ok {
			errs = append(errs, fmt.Errorf("%s: /name: %q is already the name of %s", rel, c.Name, prev))
			continue
		}
		byName[c.Name] = rel
		cases = append(cases, c)
	}
	if len(cases)+len(errs) == 0 {
		return nil, errors.New("cases: no case files")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cases, nil
}

// LoadCase parses and validates case file file (cases/NN-name.json); it
// never panics, whatever data holds.
func (s *Schemas) LoadCase(file string, data []byte) (*Case, error) {
	v, err := decodeJSON(data, capCaseJSON)
	if err != nil {
		return nil, fmt.Errorf("%s: (root): %s", file, jsonRefusal(err))
	}
	if lines := validate(s.Case, v); len(lines) > 0 {
		errs := make([]error, len(lines))
		for i, l := range lines {
			errs[i] = fmt.Errorf("%s: %s", file, l)
		}
		return nil, errors.Join(errs...)
	}
	doc, _ := v.(map[string]any)
	name, _ := str(doc, "name")
	switch m := caseFileName.FindStringSubmatch(path.Base(file)); {
	case m == nil:
		return nil, fmt.Errorf("%s: (file name): must be NN-%s.json (two digits, a dash, the case name)", file, name)
	case m[1] != name:
		return nil, fmt.Errorf("%s: /name: %q does not match the file name (want %q)", file, name, m[1])
	}
	summary, _ := str(doc, "summary")
	c := &Case{File: file, Name: name, Summary: summary, Expect: map[string]*Expectation{}}
	c.Plan, c.Lifetimes = plan(doc)
	server, _ := doc["server"].(map[string]any)
	c.Capacity, c.KeyTTL = int(number(server["capacity"])), int(number(server["key_ttl_ms"]))
	c.Replicas, c.Ledger = max(int(number(doc["replicas"])), 1), doc["ledger"] != nil
	c.SinkKeys = !c.Ledger && c.KeyTTL == 0 || mapOf(doc, "ledger")["forward_key"] == true
	target := mapOf(doc, "target")
	c.Sound, _ = str(target, "sound")
	c.Column, _ = str(target, "column")
	c.Tests = stringList(target, "tests")
	c.LosesProcess = losesProcess(doc, c.Plan)
	expect, _ := doc["expect"].(map[string]any)
	for store, e := range expect {
		em, _ := e.(map[string]any)
		exp := &Expectation{Counter: em["counter"], Ledger: em["ledger_counter"]}
		exp.ExitCodes, _ = em["exit_codes"].([]any)
		calls, _ := em["calls"].([]any)
		for _, call := range calls {
			cm, _ := call.(map[string]any)
			for i := range max(int(number(cm["repeat"])), 1) {
				var ec []ExpectedField
				for _, f := range callFields {
					val, ok := cm[f]
					if !ok {
						continue
					}
					if b, isStr := val.(string); isStr && f == "body" {
						val = expand(b, i)
					}
					ec = append(ec, ExpectedField{Name: f, Value: val})
				}
				exp.Calls = append(exp.Calls, ec)
			}
		}
		c.Expect[store] = exp
	}
	return c, nil
}

// losesProcess reports whether a case ends a server process between
// calls: a restart or stop step, or a crash fault (any part "crash-").
func losesProcess(doc map[string]any, plan []PlannedCall) bool {
	steps, _ := doc["steps"].([]any)
	for _, st := range steps {
		if sm, _ := st.(map[string]any); sm["restart"] != nil || sm["stop"] != nil {
			return true
		}
	}
	return slices.ContainsFunc(plan, func(p PlannedCall) bool {
		return p.Fault != nil && hasCrash(*p.Fault)
	})
}

// orderStores sorts stores into StoreOrder, unknown ones last by name.
func orderStores(stores []string) []string {
	rank := func(s string) int {
		if i := slices.Index(StoreOrder, s); i >= 0 {
			return i
		}
		return len(StoreOrder)
	}
	out := slices.Clone(stores)
	slices.SortStableFunc(out, func(x, y string) int { return cmp.Or(rank(x)-rank(y), strings.Compare(x, y)) })
	return out
}

// defaultBody is the body a call that names none sends.
const defaultBody = "add-one"

// expand replaces {i} by i and {n} by i+1, for repetition i from 0.
func expand(s string, i int) string {
	return strings.NewReplacer("{i}", strconv.Itoa(i), "{n}", strconv.Itoa(i+1)).Replace(s)
}

// plan expands a schema-valid case's steps into the calls they send and
// numbers the server processes by their exits: a stop or restart step ends
// its replica's (its exit code next), a restart or start step begins
// another, and the processes still running end last, in replica order.
func plan(doc map[string]any) ([]PlannedCall, int) {
	p := &planState{replicas: max(int(number(doc["replicas"])), 1)}
	for range p.replicas {
		p.current = append(p.current, p.start())
	}
	steps, _ := doc["steps"].([]any)
	for i, st := range steps {
		sm, _ := st.(map[string]any)
		p.step(i, sm)
	}
	p.exitOrder = append(p.exitOrder, p.running()...)
	// Number processes by exit-code order (each exits once; -1 stays -1).
	for i := range p.calls {
		p.calls[i].Process = slices.Index(p.exitOrder, p.calls[i].Process)
		for j, id := range p.calls[i].Maybe {
			p.calls[i].Maybe[j] = slices.Index(p.exitOrder, id)
		}
	}
	return p.calls, len(p.exitOrder)
}

// planState is plan's walk: each replica's process by start (-1: down).
type planState struct {
	replicas, started, groups, slept int
	current, exitOrder               []int
	calls                            []PlannedCall
}

func (p *planState) start() int {
	p.started++
	return p.started - 1
}

// running are the processes still running, in replica order.
func (p *planState) running() []int {
	return slices.DeleteFunc(slices.Clone(p.current), func(id int) bool { return id < 0 })
}

// step adds the calls of step i, or ends and starts processes.
func (p *planState) step(i int, sm map[string]any) {
	switch {
	case sm["call"] != nil:
		cm, _ := sm["call"].(map[string]any)
		for rep := range max(int(number(cm["repeat"])), 1) {
			p.calls = append(p.calls, p.call(cm, i, rep, -1))
		}
	case sm["concurrent"] != nil:
		gm, _ := sm["concurrent"].(map[string]any)
		cm, _ := gm["call"].(map[string]any)
		across, _ := gm["across_replicas"].(bool)
		for rep := range max(int(number(cm["repeat"])), 1) {
			for range int(number(gm["clients"])) {
				c := p.call(cm, i, rep, p.groups)
				c.InFlight = true
				if across {
					c.Replica, c.Process, c.Maybe = -1, -1, p.running()
				}
				p.calls = append(p.calls, c)
			}
			p.groups++
		}
	case sm["parallel"] != nil:
		list, _ := mapOf(sm, "parallel")["calls"].([]any)
		for _, x := range list {
			cm, _ := x.(map[string]any)
			c := p.call(cm, i, 0, p.groups)
			c.Ordered = true
			p.calls = append(p.calls, c)
		}
		p.groups++
	case sm["restart"] != nil, sm["stop"] != nil:
		m, _ := sm["restart"].(map[string]any)
		if m == nil {
			m, _ = sm["stop"].(map[string]any)
		}
		if r := int(number(m["replica"])); r < p.replicas && p.current[r] >= 0 {
			p.exitOrder = append(p.exitOrder, p.current[r])
			p.current[r] = -1
			if sm["restart"] != nil {
				p.current[r] = p.start()
			}
		}
	case sm["sleep"] != nil:
		p.slept += int(number(mapOf(sm, "sleep")["ms"]))
	case sm["start"] != nil:
		if r := int(number(mapOf(sm, "start")["replica"])); r < p.replicas && p.current[r] < 0 {
			p.current[r] = p.start()
		}
	}
}

// call is one call of a step's call object cm, for repetition rep.
func (p *planState) call(cm map[string]any, step, rep, group int) PlannedCall {
	replica := int(number(cm["replica"]))
	c := PlannedCall{Step: step, Slept: p.slept, BodyLen: len(defaultBody), Group: group, Replica: replica, Process: -1, body: callBody{xs: -1}}
	if replica >= 0 && replica < p.replicas {
		c.Process = p.current[replica]
	}
	if k, ok := str(cm, "key"); ok {
		k = expand(k, rep)
		c.Key = &k
	} else if n, ok := cm["key_bytes"]; ok {
		k := strings.Repeat("k", int(number(n)))
		c.Key = &k
	}
	if f, ok := str(cm, "fault"); ok {
		c.Fault = &f
	}
	if b, ok := str(cm, "body"); ok {
		c.BodyLen = len(expand(b, rep))
		c.body = callBody{text: &b, rep: rep, xs: -1}
	} else if n, ok := cm["body_bytes"]; ok {
		c.BodyLen = int(number(n))
		c.body.xs = c.BodyLen
	}
	return c
}

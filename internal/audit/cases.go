package audit

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// StoreOrder is the canonical store order of runs. Stores a case file
// names that are not listed here sort after these, by name.
var StoreOrder = []string{"volatile", "durable"}

// Case is one case file: its name and, per store, what must be observed.
type Case struct {
	File      string                  // slash path relative to the root, e.g. cases/20-keyed_lost_reply.json
	Name      string                  // the file's name field
	Summary   string                  // the file's summary field
	Expect    map[string]*Expectation // by store
	Plan      []PlannedCall           // the calls the steps send, in the order results.json records them
	Lifetimes int                     // server processes a run starts: 1 + the restart steps
}

// PlannedCall is one call a case's steps send, as the audit expands them:
// a call step with repeat gives repeat calls with {i} in the key replaced
// by 0..repeat-1; a concurrent step gives, per repeat, clients calls
// (group counts the groups from 0; -1 for a lone call).
type PlannedCall struct {
	Step     int     // index of the step in the case file
	Key      *string // the Idempotency-Key sent; nil: no header
	Fault    *string // the X-Lab-Fault sent; nil: no header
	BodyLen  int     // request body length in bytes
	Group    int     // concurrent group, -1 for a lone call
	Lifetime int     // which server process (0, 1, ...) answers it
}

// Stores returns the stores the case has an expectation for, in store order.
func (c *Case) Stores() []string {
	return orderStores(sortedKeys(c.Expect))
}

// Expectation is what one run of a case on a store must observe.
type Expectation struct {
	Counter   any   // a json.Number
	ExitCodes []any // json.Numbers, exact list
	Calls     []ExpectedCall
}

// ExpectedCall is one expected call after expanding repeat; only the
// fields present in the case file are checked.
type ExpectedCall struct {
	Fields []ExpectedField // in the order outcome, status, body, replayed
}

// ExpectedField is one checked field of a call and its expected value
// (a decoded JSON value: string, json.Number, bool or nil).
type ExpectedField struct {
	Name  string
	Value any
}

// callFields are the fields of an expected call that are compared.
var callFields = []string{"outcome", "status", "body", "replayed"}

var caseFileName = regexp.MustCompile(`^[0-9]{2}-(.+)\.json$`)

// LoadCases reads every *.json file in root/cases, sorted by file name,
// validating each against the case schema. Any bad file makes the whole
// set unreadable: the error lists every problem, one per line, each as
// "cases/FILE: PATH: PROBLEM".
func LoadCases(root string, s *Schemas) ([]*Case, error) {
	if fi, err := os.Lstat(filepath.Join(root, "cases")); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("cases: %w", errNotRegular)
	}
	entries, err := os.ReadDir(filepath.Join(root, "cases"))
	if err != nil {
		return nil, fmt.Errorf("cases: %w", unwrapPath(err))
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") && !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, errors.New("cases: no case files")
	}
	var (
		cases  []*Case
		errs   []error
		byName = map[string]string{}
	)
	for _, n := range names {
		rel := "cases/" + n
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
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cases, nil
}

// LoadCase parses and validates one case file; file is its slash path
// (cases/NN-name.json), whose base name must be NN-<name>.json.
// It never panics, whatever data holds.
func (s *Schemas) LoadCase(file string, data []byte) (*Case, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: (root): not valid JSON: %v", file, err)
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
	m := caseFileName.FindStringSubmatch(path.Base(file))
	if m == nil {
		return nil, fmt.Errorf("%s: (file name): must be NN-%s.json (two digits, a dash, the case name)", file, name)
	}
	if m[1] != name {
		return nil, fmt.Errorf("%s: /name: %q does not match the file name (want %q)", file, name, m[1])
	}
	summary, _ := str(doc, "summary")
	c := &Case{File: file, Name: name, Summary: summary, Expect: map[string]*Expectation{}, Lifetimes: 1}
	steps, _ := doc["steps"].([]any)
	group := 0
	for i, st := range steps {
		sm, _ := st.(map[string]any)
		switch {
		case sm["call"] != nil:
			cm, _ := sm["call"].(map[string]any)
			c.Plan = append(c.Plan, planCalls(cm, i, 1, -1, c.Lifetimes-1, &group)...)
		case sm["concurrent"] != nil:
			gm, _ := sm["concurrent"].(map[string]any)
			cm, _ := gm["call"].(map[string]any)
			clients := int(number(gm["clients"]))
			c.Plan = append(c.Plan, planCalls(cm, i, clients, 0, c.Lifetimes-1, &group)...)
		case sm["restart"] != nil:
			c.Lifetimes++
		}
	}
	expect, _ := doc["expect"].(map[string]any)
	for store, e := range expect {
		em, _ := e.(map[string]any)
		exp := &Expectation{Counter: em["counter"]}
		exp.ExitCodes, _ = em["exit_codes"].([]any)
		calls, _ := em["calls"].([]any)
		for _, call := range calls {
			cm, _ := call.(map[string]any)
			repeat := 1
			if r, ok := cm["repeat"]; ok {
				if n, err := strconv.Atoi(render(r)); err == nil && n > 0 {
					repeat = n
				}
			}
			for i := 1; i <= repeat; i++ {
				var ec ExpectedCall
				for _, f := range callFields {
					val, ok := cm[f]
					if !ok {
						continue
					}
					if b, isStr := val.(string); isStr && f == "body" {
						val = strings.ReplaceAll(b, "{n}", strconv.Itoa(i))
					}
					ec.Fields = append(ec.Fields, ExpectedField{Name: f, Value: val})
				}
				exp.Calls = append(exp.Calls, ec)
			}
		}
		c.Expect[store] = exp
	}
	return c, nil
}

// orderStores sorts stores into StoreOrder, unknown ones last by name.
func orderStores(stores []string) []string {
	rank := func(s string) int {
		for i, o := range StoreOrder {
			if o == s {
				return i
			}
		}
		return len(StoreOrder)
	}
	out := append([]string(nil), stores...)
	sort.SliceStable(out, func(i, j int) bool {
		ri, rj := rank(out[i]), rank(out[j])
		if ri != rj {
			return ri < rj
		}
		return out[i] < out[j]
	})
	return out
}

// defaultBodyLen is the length of the body a call that names none sends
// ("add-one", the design's default body; manifest.protocol.default_body
// must agree).
const defaultBody = "add-one"

// planCalls expands one call of step: repeat times, clients calls each
// (clients 1 and group -1 for a lone call).
func planCalls(cm map[string]any, step, clients, group, lifetime int, groups *int) []PlannedCall {
	repeat := 1
	if r := int(number(cm["repeat"])); r > 0 {
		repeat = r
	}
	bodyLen := len(defaultBody)
	if b, ok := str(cm, "body"); ok {
		bodyLen = len(b)
	} else if n, ok := cm["body_bytes"]; ok {
		bodyLen = int(number(n))
	}
	var fault *string
	if f, ok := str(cm, "fault"); ok {
		fault = &f
	}
	var out []PlannedCall
	for i := 0; i < repeat; i++ {
		var key *string
		if k, ok := str(cm, "key"); ok {
			k = strings.ReplaceAll(k, "{i}", strconv.Itoa(i))
			key = &k
		}
		g := -1
		if group >= 0 {
			g = *groups
			*groups++
		}
		for range clients {
			out = append(out, PlannedCall{Step: step, Key: key, Fault: fault, BodyLen: bodyLen, Group: g, Lifetime: lifetime})
		}
	}
	return out
}

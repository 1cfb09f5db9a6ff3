// Package casefile loads the case files of cases/ for the runner: it checks
// each against schema/case.schema.json, its file name and the rules a
// schema cannot state, and turns its steps into Go values, with what the
// lab needs of its expectations (the audit judges runs against them).
//
// A case file is named NN-name.json; the two digits order the suite, so adding
// a case is adding a file. No case name appears in Go code.
package casefile

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"idemlab/internal/audit/strict"
	"idemlab/internal/protocol"
	"idemlab/internal/safefile"
)

// SchemaName is the schema every case file must satisfy.
const SchemaName = "case.schema.json"

// Case is one case file: what the runner does and what must be observed.
type Case struct {
	Name     string // the file's name field
	File     string // the path it was read from
	Summary  string // one sentence for people
	Replicas int    // servers running at once, at least 1
	Steps    []Step // in order
	Expect   map[protocol.Store]Expectation
	Ledger   *Ledger       // a server every replica calls for its effect (effectserver -downstream); nil: none
	Server   Server        // the replicas' flags the case sets in place of the lab's
	Target   TargetJudging // how a run on a target is judged; zero: the case runs on no target
}

// TargetJudging says which store's expectation a sound implementation
// shows, and which properties the case tests, for the audit's verdict.
type TargetJudging struct {
	Sound  protocol.Store `json:"sound"`
	Tests  []string       `json:"tests"`
	Column string         `json:"column"` // the matrix column the audit shows its runs in (MATRIX.md)
}

// Ledger is a case's ledger: a durable effect server of its own.
type Ledger struct {
	ForwardKey bool `json:"forward_key"` // the replicas' -forward-key
	KeyTTLMS   int  `json:"key_ttl_ms"`  // the ledger's -key-ttl, ms; 0: never
}

// Server is the replicas' flags a case sets; zero fields keep the lab's.
type Server struct {
	LeaseMS  int `json:"lease_ms"`   // -lease, ms (only with a ledger)
	KeyTTLMS int `json:"key_ttl_ms"` // -key-ttl, ms; 0: never
	Capacity int `json:"capacity"`   // -capacity
}

// Step is exactly one action of a case.
type Step struct {
	Call       *Call       `json:"call,omitempty"`
	Concurrent *Concurrent `json:"concurrent,omitempty"`
	Parallel   *Parallel   `json:"parallel,omitempty"`
	Restart    *Restart    `json:"restart,omitempty"`
	Stop       *StopStep   `json:"stop,omitempty"`
	Start      *StartStep  `json:"start,omitempty"`
	Sleep      *SleepStep  `json:"sleep,omitempty"`
}

// SleepStep waits MS milliseconds: the lab's control of time, to let a
// lease or a key TTL run out between calls.
type SleepStep struct {
	MS int `json:"ms"`
}

// Call is one POST /effect, or Repeat consecutive ones.
type Call struct {
	Key         *string `json:"key,omitempty"`          // Idempotency-Key sent verbatim (templated); nil sends none
	KeyBytes    *int    `json:"key_bytes,omitempty"`    // a key of that many 'k' bytes instead
	ContentType *string `json:"content_type,omitempty"` // sent instead of the lab's (or a target's); "" sends none
	TimeoutMS   int     `json:"timeout_ms,omitempty"`   // the client's wait for this reply, if more than 0
	Body        *string `json:"body,omitempty"`         // nil means protocol.DefaultBody
	BodyBytes   *int    `json:"body_bytes,omitempty"`   // a body of that many 'x' bytes instead
	Fault       string  `json:"fault,omitempty"`        // X-Lab-Fault; empty sends none
	Repeat      int     `json:"repeat,omitempty"`       // 0 or 1: once
	Replica     int     `json:"replica,omitempty"`      // the replica it goes to
}

// Concurrent is Clients identical calls released together.
type Concurrent struct {
	Clients        int  `json:"clients"`
	Call           Call `json:"call"`
	AcrossReplicas bool `json:"across_replicas,omitempty"` // client i to replica i mod Replicas, not all to Call.Replica
}

// Parallel is different calls started together, the i-th StaggerMS × i
// milliseconds after the first.
type Parallel struct {
	Calls     []Call `json:"calls"`
	StaggerMS int    `json:"stagger_ms,omitempty"`
}

// Restart stops a replica's server and starts it again on the same state.
type Restart struct {
	Stop    Stop `json:"stop"`
	Replica int  `json:"replica,omitempty"`
}

// StopStep stops a running replica's server and leaves it down.
type StopStep struct {
	How     Stop `json:"how"`
	Replica int  `json:"replica,omitempty"`
}

// StartStep starts a stopped replica's server again.
type StartStep struct {
	Replica int `json:"replica,omitempty"`
}

// A Stop says how a restart ends the running server.
type Stop string

// The ways to stop a server (the schema allows exactly these).
const (
	StopSIGTERM   Stop = "sigterm"    // send SIGTERM and wait for the exit
	StopAwaitExit Stop = "await_exit" // the server is exiting on its own (a crash fault): wait
)

// Expectation is what the lab reads of what a store must show: each
// expected call's status and whether the ledger's counter is given. The
// audit judges a run against the whole expectation.
type Expectation struct {
	Calls []struct {
		Status   int   `json:"status"` // 0: not checked
		Repeat   int   `json:"repeat"`
		Replayed *bool `json:"replayed"`
	} `json:"calls"`
	LedgerCounter *int64 `json:"ledger_counter"`
}

// UnmarshalJSON reads the lab's part and ignores the rest (the schema's).
func (x *Expectation) UnmarshalJSON(b []byte) error {
	type lenient Expectation
	return json.Unmarshal(b, (*lenient)(x))
}

// Repeat templates: in a repeated call's key and body (and, for the audit,
// a repeated expected call's body), "{i}" becomes the repetition's index
// counted from 0 and "{n}" its number counted from 1 (so the third of key
// "k-{i}", body "{n}" is key "k-2" expecting "3").
const (
	IndexTemplate  = "{i}" // 0, 1, ..., repeat-1
	NumberTemplate = "{n}" // 1, 2, ..., repeat
)

// expand fills the repeat templates of s for repetition i (from 0).
func expand(s string, i int) string {
	return strings.NewReplacer(IndexTemplate, strconv.Itoa(i), NumberTemplate, strconv.Itoa(i+1)).Replace(s)
}

// Statuses lists the expected status of every call the steps make, in
// order, repeats unrolled; 0 where none is expected.
func (x Expectation) Statuses() []int {
	var out []int
	for _, c := range x.Calls {
		for range max(c.Repeat, 1) {
			out = append(out, c.Status)
		}
	}
	return out
}

// Bounds on a case, so that the runner's and the audit's memory and time
// stay bounded whatever a case file asks: at most MaxFiles case files of
// MaxFileBytes, each making at most MaxCalls calls (a few hundred bytes of
// evidence each) and waiting at most MaxWaitMS in all. MaxBodyBytes,
// MaxKeyLength and MaxFaultLength are the schema's (TestSchemaBounds): a
// call's headers stay far below any server's header limit, whose refusal
// could race the request like an early 413.
const (
	MaxFiles       = 100
	MaxFileBytes   = 1 << 20
	MaxCalls       = 10000
	MaxWaitMS      = 120000
	MaxBodyBytes   = 1 << 20
	MaxKeyLength   = 200
	MaxFaultLength = 200
)

// fileName is the shape of a case file's name: two digits, a dash, the case name.
var fileName = regexp.MustCompile(`^[0-9]{2}-([a-z][a-z0-9_]{0,63})\.json$`)

// Error is a case file that cannot be used, naming the file and the field.
type Error struct {
	File    string
	Problem string
}

// Error names the file, then the field and the problem.
func (e *Error) Error() string { return e.File + ": " + e.Problem }

// LoadDir loads every *.json file of dir, in file-name order.
func LoadDir(dir string, schemas *strict.Schemas) ([]Case, error) {
	if fi, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("read cases: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("read cases: %s is not a folder", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read cases: %w", err)
	}
	var names []string // in file-name order, as os.ReadDir returns them
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("read cases: no *.json files in %s", dir)
	}
	if len(names) > MaxFiles {
		return nil, fmt.Errorf("read cases: %d *.json files in %s, at most %d", len(names), dir, MaxFiles)
	}
	var cases []Case
	seen := map[string]string{}
	for _, n := range names {
		path := filepath.Join(dir, n)
		b, err := safefile.Read(path, MaxFileBytes)
		if err != nil {
			return nil, &Error{File: path, Problem: strings.TrimPrefix(err.Error(), path+": ")}
		}
		c, err := Parse(path, b, schemas)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[c.Name]; dup {
			return nil, &Error{File: path, Problem: fmt.Sprintf("name: %q is already used by %s", c.Name, prev)}
		}
		seen[c.Name] = path
		cases = append(cases, c)
	}
	return cases, nil
}

// Parse checks one case file's bytes, read from path, and decodes it.
func Parse(path string, b []byte, schemas *strict.Schemas) (Case, error) {
	m := fileName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return Case{}, &Error{File: path, Problem: "file name: want NN-name.json (two digits, a dash, a lower-case name)"}
	}
	// The audit's reading (strict JSON, then the schema), so that the
	// runner never runs a case whose evidence the audit would refuse.
	if _, err := schemas.Check(SchemaName, b, strict.Caps{Values: MaxFileBytes, Objects: MaxFileBytes}); err != nil {
		if _, ok := errors.AsType[*strict.Error](err); ok {
			return Case{}, &Error{File: path, Problem: strict.Problem(b, err)}
		}
		return Case{}, fmt.Errorf("%s: %w", path, err)
	}
	var raw struct {
		Name     string                         `json:"name"`
		Summary  string                         `json:"summary"`
		Replicas int                            `json:"replicas"`
		Steps    []Step                         `json:"steps"`
		Expect   map[protocol.Store]Expectation `json:"expect"`
		Ledger   *Ledger                        `json:"ledger"`
		Server   Server                         `json:"server"`
		Target   TargetJudging                  `json:"target"`
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&raw); err != nil {
		return Case{}, &Error{File: path, Problem: err.Error()}
	}
	if raw.Name != m[1] {
		return Case{}, &Error{File: path, Problem: fmt.Sprintf("name: %q does not match the file name (want %q)", raw.Name, m[1])}
	}
	c := Case{Name: raw.Name, File: path, Summary: raw.Summary, Replicas: max(raw.Replicas, 1), Steps: raw.Steps, Expect: raw.Expect,
		Ledger: raw.Ledger, Server: raw.Server, Target: raw.Target}
	if n := c.CallCount(); n > MaxCalls {
		return Case{}, &Error{File: path, Problem: fmt.Sprintf("steps: %d calls, at most %d per case", n, MaxCalls)}
	}
	if ms := c.WaitMS(); ms > MaxWaitMS {
		return Case{}, &Error{File: path, Problem: fmt.Sprintf("steps: the sleeps and staggers wait %d ms in all, at most %d per case", ms, MaxWaitMS)}
	}
	if err := cmp.Or(c.eachCall(c.checkCall), c.checkReplicas(), c.checkExpect()); err != nil {
		return Case{}, &Error{File: path, Problem: err.Error()}
	}
	return c, nil
}

// A PlannedCall is what the lab needs to know of one call the steps make
// before it runs a case on a target: its fault and body length.
type PlannedCall struct {
	Fault   string
	BodyLen int
	Key     string // "" for none
	Slept   int    // ms the sleep steps before it wait in all
}

// Plan lists the calls the steps make, in recorded order.
func (c Case) Plan() []PlannedCall {
	var out []PlannedCall
	slept := 0
	add := func(call Call, i, n int) {
		for range n {
			k := call.KeyFor(i)
			out = append(out, PlannedCall{Fault: call.Fault, BodyLen: len(call.BodyFor(i)), Key: *cmp.Or(k, new("")), Slept: slept})
		}
	}
	for _, s := range c.Steps {
		switch {
		case s.Sleep != nil:
			slept += s.Sleep.MS
		case s.Call != nil:
			for i := range max(s.Call.Repeat, 1) {
				add(*s.Call, i, 1)
			}
		case s.Concurrent != nil:
			for i := range max(s.Concurrent.Call.Repeat, 1) {
				add(s.Concurrent.Call, i, s.Concurrent.Clients)
			}
		case s.Parallel != nil:
			for _, call := range s.Parallel.Calls {
				add(call, 0, 1)
			}
		}
	}
	return out
}

// KeptMS is the longest the sound run keeps a key between calls: the
// sleeps from a key's fresh 2xx result (or its first call) to a later call
// expected to replay it.
func (c Case) KeptMS() int {
	var replayed, fresh []bool
	for _, e := range c.Expect[c.Target.Sound].Calls {
		for range max(e.Repeat, 1) {
			replayed = append(replayed, e.Replayed != nil && *e.Replayed)
			fresh = append(fresh, e.Replayed != nil && !*e.Replayed && e.Status/100 == 2)
		}
	}
	from, longest := map[string]int{}, 0
	for i, p := range c.Plan() {
		if i >= len(replayed) || p.Key == "" {
			continue
		}
		switch f, seen := from[p.Key]; {
		case replayed[i]:
			longest = max(longest, p.Slept-f)
		case fresh[i] || !seen:
			from[p.Key] = p.Slept
		}
	}
	return longest
}

// MaxSuiteCalls bounds the calls of one run of the runner: results.json
// takes about 230 bytes a call, and the audit reads it up to 8 MiB.
const MaxSuiteCalls = 30000

// CheckSuite refuses cases making over MaxSuiteCalls calls on stores stores.
func CheckSuite(cases []Case, stores int) error {
	n := 0
	for _, c := range cases {
		n += c.CallCount() * stores
	}
	if n > MaxSuiteCalls {
		return fmt.Errorf("cases: %d calls on %d stores in all, at most %d per run of the runner (select fewer with -case or -store)", n, stores, MaxSuiteCalls)
	}
	return nil
}

// CallCount is how many HTTP calls the steps make.
func (c Case) CallCount() int {
	n := 0
	for _, s := range c.Steps {
		switch {
		case s.Call != nil:
			n += max(s.Call.Repeat, 1)
		case s.Concurrent != nil:
			n += s.Concurrent.Clients * max(s.Concurrent.Call.Repeat, 1)
		case s.Parallel != nil:
			n += len(s.Parallel.Calls)
		}
	}
	return n
}

// WaitMS is how long the steps wait on purpose, in milliseconds: every
// sleep step, and each parallel step's last call's stagger.
func (c Case) WaitMS() int {
	ms := 0
	for _, s := range c.Steps {
		switch {
		case s.Sleep != nil:
			ms += s.Sleep.MS
		case s.Parallel != nil && len(s.Parallel.Calls) > 1:
			ms += s.Parallel.StaggerMS * (len(s.Parallel.Calls) - 1)
		}
	}
	return ms
}

// eachCall calls f with every call of the steps, its field path and
// whether it is a parallel step's, up to the first error.
func (c Case) eachCall(f func(field string, call Call, parallel bool) error) error {
	for i, s := range c.Steps {
		at := fmt.Sprintf("/steps/%d", i)
		var err error
		switch {
		case s.Call != nil:
			err = f(at+"/call", *s.Call, false)
		case s.Concurrent != nil:
			err = f(at+"/concurrent/call", s.Concurrent.Call, false)
		case s.Parallel != nil:
			for j, call := range s.Parallel.Calls {
				if err = f(fmt.Sprintf("%s/parallel/calls/%d", at, j), call, true); err != nil {
					break
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkCall refuses a call with two bodies or two keys, to a replica the
// case does not run, repeated in a parallel step, or with a key or fault
// HTTP cannot carry as written (headerValue): the client would refuse to
// send it, and the run record a reply the server never dropped.
func (c Case) checkCall(field string, call Call, parallel bool) error {
	switch {
	case call.Body != nil && call.BodyBytes != nil:
		return fmt.Errorf("%s: body and body_bytes exclude each other (give one)", field)
	case call.Key != nil && call.KeyBytes != nil:
		return fmt.Errorf("%s: key and key_bytes exclude each other (give one)", field)
	case parallel && call.Repeat > 1:
		return fmt.Errorf("%s/repeat: a parallel call is made once", field)
	}
	if err := c.validReplica(field+"/replica", call.Replica); err != nil {
		return err
	}
	if call.Key != nil {
		if err := headerValue(*call.Key); err != nil {
			return fmt.Errorf("%s/key: %w", field, err)
		}
	}
	if call.Fault != "" {
		if err := headerValue(call.Fault); err != nil {
			return fmt.Errorf("%s/fault: %w", field, err)
		}
	}
	return nil
}

func (c Case) validReplica(field string, r int) error {
	if r < 0 || r >= c.Replicas {
		return fmt.Errorf("%s: replica %d, but the case runs %d (replicas)", field, r, c.Replicas)
	}
	return nil
}

// headerValue refuses a value an HTTP header cannot carry byte for byte.
func headerValue(v string) error {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return fmt.Errorf("byte %d is %q, a control character an HTTP header cannot carry", i, b)
		}
	}
	if strings.TrimLeft(v, " \t") != v || strings.TrimRight(v, " \t") != v {
		return fmt.Errorf("%q: white space at either end is trimmed from an HTTP header, so it cannot be sent as written", v)
	}
	return nil
}

// checkReplicas catches steps that stop a replica that is down, start one
// that is up, name one the case does not run, or spread a concurrent step
// across one replica: mistakes named at load time, not as a broken run.
func (c Case) checkReplicas() error {
	down := make([]bool, c.Replicas) // every replica starts up
	for i, s := range c.Steps {
		at := fmt.Sprintf("/steps/%d", i)
		var err error
		switch {
		case s.Concurrent != nil && s.Concurrent.AcrossReplicas && c.Replicas < 2:
			err = fmt.Errorf("%s/concurrent/across_replicas: the case runs one replica", at)
		case s.Restart != nil:
			if err = c.validReplica(at+"/restart/replica", s.Restart.Replica); err == nil && down[s.Restart.Replica] {
				err = fmt.Errorf("%s/restart: replica %d is already stopped (use start)", at, s.Restart.Replica)
			}
		case s.Stop != nil:
			if err = c.validReplica(at+"/stop/replica", s.Stop.Replica); err == nil && down[s.Stop.Replica] {
				err = fmt.Errorf("%s/stop: replica %d is already stopped", at, s.Stop.Replica)
			}
			if err == nil {
				down[s.Stop.Replica] = true
			}
		case s.Start != nil:
			if err = c.validReplica(at+"/start/replica", s.Start.Replica); err == nil && !down[s.Start.Replica] {
				err = fmt.Errorf("%s/start: replica %d is already running", at, s.Start.Replica)
			}
			if err == nil {
				down[s.Start.Replica] = false
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkExpect catches expectations that cannot line up with the case (as
// many calls as the steps make, ledger_counter exactly with a ledger, one
// for target/sound) and a lease without a ledger, at load time.
func (c Case) checkExpect() error {
	if c.Ledger == nil && c.Server.LeaseMS > 0 {
		return errors.New("server/lease_ms: only with a ledger (the lease is the downstream mode's)")
	}
	for _, s := range slices.Sorted(maps.Keys(c.Expect)) {
		switch got, want, has := len(c.Expect[s].Statuses()), c.CallCount(), c.Expect[s].LedgerCounter != nil; {
		case got != want:
			return fmt.Errorf("expect.%s.calls: %d expected calls, but the steps make %d calls", s, got, want)
		case c.Ledger != nil && !has:
			return fmt.Errorf("expect.%s.ledger_counter: required, the case has a ledger", s)
		case c.Ledger == nil && has:
			return fmt.Errorf("expect.%s.ledger_counter: the case has no ledger", s)
		}
	}
	if _, ok := c.Expect[c.Target.Sound]; c.Target.Sound != "" && !ok {
		return fmt.Errorf("target/sound: %q has no expectation in expect", c.Target.Sound)
	}
	return nil
}

// KeyFor is the Idempotency-Key of repetition i (from 0) of a call, or nil.
func (c Call) KeyFor(i int) *string {
	if c.KeyBytes != nil {
		k := strings.Repeat("k", *c.KeyBytes)
		return &k
	}
	if c.Key == nil {
		return nil
	}
	k := expand(*c.Key, i)
	return &k
}

// BodyFor is the request body of repetition i (from 0) of the call.
func (c Call) BodyFor(i int) []byte {
	switch {
	case c.BodyBytes != nil:
		return bytes.Repeat([]byte{'x'}, *c.BodyBytes)
	case c.Body != nil:
		return []byte(expand(*c.Body, i))
	default:
		return []byte(protocol.DefaultBody)
	}
}

// Package target holds what the lab knows of a service it did not write: a
// folder targets/NAME/ with target.json (schema/target.schema.json). It
// loads and checks target.json, digests the folder, runs its setup once per
// digest, expands the start command's placeholders, places each lab fault
// (place.go), and reads the versions of the code under test. Package
// caserun runs a target's replicas.
package target

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"idemlab/internal/audit/strict"
	"idemlab/internal/safefile"
)

// SchemaName is the schema every target.json must satisfy.
const SchemaName = "target.schema.json"

// FileName is the file a target folder must hold.
const FileName = "target.json"

// MaxFileBytes bounds target.json.
const MaxFileBytes = 64 << 10

// RequireEnv set to 1 (as CI does) fails a target whose programs are missing.
const RequireEnv = "IDEMLAB_REQUIRE_TARGETS"

// How long a target may take to get ready, and SIGTERM before SIGKILL,
// unless target.json says.
const (
	DefaultReadyWithin = 20 * time.Second
	DefaultStopGrace   = 5 * time.Second
)

// A Target is one loaded target folder.
type Target struct {
	Name     string
	Summary  string
	Dir      string // the folder, absolute
	Requires []string
	Install  string
	Setup    []string
	Start    Start
	Request  Request
	Replay   *Replay // nil: the target marks no replay
	Effects  Effects
	Native   map[string]NativeFault // lab fault name (or "*") → the target's header
	Claims   Claims
	Services []Service
	Versions Versions
	Mirrors  string // the lab's own server only: the store it must reproduce
}

// Start is how a replica is started and known to be ready.
type Start struct {
	Argv        []string
	Env         map[string]string
	ReadyLine   *regexp.Regexp // a stdout line; nil for a probe
	ReadyHTTP   string         // with ReadyLine nil: GET this path ("" for a TCP connection)
	ReadyWithin time.Duration
	StopGrace   time.Duration
}

// Request is how the lab's clients call the target.
type Request struct {
	Method      string
	Path        string
	KeyHeader   string
	ContentType string
}

// Replay is the header and value by which the target marks a replay.
type Replay struct {
	Header string `json:"header"`
	Value  string `json:"value"`
}

// Effects says how the effects applied are counted: by the sink, or by a
// command run after every process of the run exited.
type Effects struct {
	Sink    bool
	Count   []string
	Journal []string // prints the effects applied (store.State's JSON), for chaos
}

// NativeFault is a header the target honours in place of a lab fault.
type NativeFault struct {
	Header string `json:"header"`
	Value  string `json:"value"`
}

// Claims is what the target promises.
type Claims struct {
	Durable     bool   `json:"durable"`
	SharedStore bool   `json:"shared_store"`
	Capacity    *int   `json:"capacity"`
	MaxBody     *int64 `json:"max_body"`
}

// A Service is a side service the lab starts for every run of a target.
type Service string

// The side services.
const (
	Redis    Service = "redis"
	Postgres Service = "postgres"
)

// Versions says what the evidence records about the code under test.
type Versions struct {
	Lock     string   `json:"lock"`
	Packages []string `json:"packages"`
	Runtime  []string `json:"runtime"`
}

// file is target.json as written.
type file struct {
	Name     string   `json:"name"`
	Summary  string   `json:"summary"`
	Requires []string `json:"requires"`
	Install  string   `json:"install"`
	Setup    []string `json:"setup"`
	Start    struct {
		Argv  []string          `json:"argv"`
		Env   map[string]string `json:"env"`
		Ready struct {
			Stdout   string `json:"stdout"`
			TCP      bool   `json:"tcp"`
			HTTP     string `json:"http"`
			WithinMS int    `json:"within_ms"`
		} `json:"ready"`
		StopGraceMS *int `json:"stop_grace_ms"`
	} `json:"start"`
	Request struct {
		Method      string  `json:"method"`
		Path        string  `json:"path"`
		KeyHeader   string  `json:"key_header"`
		ContentType *string `json:"content_type"`
	} `json:"request"`
	Replay  *Replay         `json:"replay"`
	Effects json.RawMessage `json:"effects"`
	Faults  struct {
		Native map[string]NativeFault `json:"native"`
	} `json:"faults"`
	Claims   Claims    `json:"claims"`
	Services []Service `json:"services"`
	Versions Versions  `json:"versions"`
	Mirrors  string    `json:"mirrors"`
}

// Load reads DIR/target.json and checks it against the schema and the rules
// a schema cannot state. Errors name the file and what was wrong.
func Load(dir string, schemas *strict.Schemas) (*Target, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", dir, err)
	}
	path := filepath.Join(abs, FileName)
	b, err := safefile.Read(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", dir, err)
	}
	t, err := Parse(path, b, schemas)
	if err != nil {
		return nil, err
	}
	if base := filepath.Base(abs); base != t.Name {
		return nil, fmt.Errorf("%s: name %q: want the folder's name %q", path, t.Name, base)
	}
	t.Dir = abs
	return t, nil
}

// Parse checks the bytes of a target.json read from path.
func Parse(path string, b []byte, schemas *strict.Schemas) (*Target, error) {
	if _, err := schemas.Check(SchemaName, b, strict.Caps{Values: MaxFileBytes, Objects: MaxFileBytes}); err != nil {
		return nil, fmt.Errorf("%s: %s", path, strict.Problem(b, err))
	}
	var f file
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := f.target()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// target turns target.json into a Target and checks the rules a schema
// cannot state (the ready rule, placeholders, the fault names).
func (f *file) target() (*Target, error) {
	t := f.newTarget()
	re, err := f.readyLine()
	if err != nil {
		return nil, err
	}
	t.Start.ReadyLine = re
	portFromLine := re != nil && re.NumSubexp() == 1
	if t.Effects, err = f.effects(); err != nil {
		return nil, err
	}
	probe := f.Start.Ready.TCP || f.Start.Ready.HTTP != ""
	if err := t.checkPlaceholders(portFromLine, probe); err != nil {
		return nil, err
	}
	if err := t.checkNative(); err != nil {
		return nil, err
	}
	if t.Versions.Lock == "" && len(t.Versions.Packages) > 0 {
		return nil, errors.New("versions.packages: needs versions.lock, the file that pins them")
	}
	return t, nil
}

// newTarget copies what target.json says as written, with the defaults
// for the method, content type and start bounds it leaves out.
func (f *file) newTarget() *Target {
	t := &Target{
		Name: f.Name, Summary: f.Summary, Requires: f.Requires, Install: f.Install, Setup: f.Setup,
		Replay: f.Replay, Native: f.Faults.Native, Claims: f.Claims, Services: f.Services,
		Versions: f.Versions, Mirrors: f.Mirrors,
		Start: Start{Argv: f.Start.Argv, Env: f.Start.Env, ReadyHTTP: f.Start.Ready.HTTP,
			ReadyWithin: DefaultReadyWithin, StopGrace: DefaultStopGrace},
		Request: Request{Method: f.Request.Method, Path: f.Request.Path, KeyHeader: f.Request.KeyHeader, ContentType: "text/plain"},
	}
	if t.Request.Method == "" {
		t.Request.Method = "POST"
	}
	if f.Request.ContentType != nil {
		t.Request.ContentType = *f.Request.ContentType
	}
	if ms := f.Start.Ready.WithinMS; ms > 0 {
		t.Start.ReadyWithin = time.Duration(ms) * time.Millisecond
	}
	if g := f.Start.StopGraceMS; g != nil {
		t.Start.StopGrace = time.Duration(*g) * time.Millisecond
	}
	return t
}

// readyLine checks that start.ready gives exactly one rule and compiles
// its stdout line, nil when the rule is a probe. The line's one group, if
// any, is the port the target chose.
func (f *file) readyLine() (*regexp.Regexp, error) {
	ready := f.Start.Ready
	rules := 0
	for _, set := range []bool{ready.Stdout != "", ready.TCP, ready.HTTP != ""} {
		if set {
			rules++
		}
	}
	if rules != 1 {
		return nil, errors.New("start.ready: want exactly one of stdout, tcp, http")
	}
	if ready.Stdout == "" {
		return nil, nil
	}
	re, err := regexp.Compile(ready.Stdout)
	if err != nil {
		return nil, fmt.Errorf("start.ready.stdout: %w", err)
	}
	if re.NumSubexp() > 1 {
		return nil, fmt.Errorf("start.ready.stdout %q: at most one group (the port)", ready.Stdout)
	}
	return re, nil
}

// effects reads "sink", or a count command and optionally a journal command.
func (f *file) effects() (Effects, error) {
	if string(bytes.TrimSpace(f.Effects)) == `"sink"` {
		return Effects{Sink: true}, nil
	}
	var c struct {
		Count   []string `json:"count"`
		Journal []string `json:"journal"`
	}
	if err := json.Unmarshal(f.Effects, &c); err != nil || len(c.Count) == 0 {
		return Effects{}, errors.New(`effects: want "sink" or {"count": [argv...]}`)
	}
	return Effects{Count: c.Count, Journal: c.Journal}, nil
}

// checkPlaceholders checks that every placeholder of the commands is one
// the lab fills, that the effects commands, run once every process exited,
// take no {port}, and that {port} is given to the target unless its ready
// line reports the port it chose (portFromLine, which needs no probe).
func (t *Target) checkPlaceholders(portFromLine, probe bool) error {
	type field struct {
		where, value string
		after        bool // an effects command's
	}
	var fields []field
	for i, a := range t.Start.Argv {
		fields = append(fields, field{fmt.Sprintf("start.argv[%d]", i), a, false})
	}
	for _, k := range slices.Sorted(maps.Keys(t.Start.Env)) {
		fields = append(fields, field{"start.env." + k, t.Start.Env[k], false})
	}
	for i, a := range t.Effects.Count {
		fields = append(fields, field{fmt.Sprintf("effects.count[%d]", i), a, true})
	}
	for i, a := range t.Effects.Journal {
		fields = append(fields, field{fmt.Sprintf("effects.journal[%d]", i), a, true})
	}
	known, toldPort, portAfter := t.placeholders(), false, false
	for _, f := range fields {
		for _, m := range placeholderRE.FindAllString(f.value, -1) {
			if !slices.Contains(known, m) {
				return fmt.Errorf("%s: unknown placeholder %s (known: %s)", f.where, m, strings.Join(known, " "))
			}
			toldPort, portAfter = toldPort || m == PortPlaceholder, portAfter || f.after && m == PortPlaceholder
		}
	}
	switch {
	case portAfter:
		return errors.New("effects.count and effects.journal: {port} means nothing once every process exited")
	case !portFromLine && !toldPort:
		return errors.New("start: the target is never told {port} and its ready line reports no port (give {port} in argv or env, or a group in ready.stdout)")
	case portFromLine && probe:
		return errors.New("start.ready: a port from the ready line needs no probe")
	}
	return nil
}

// checkNative refuses a native fault that names no lab fault (nor "*").
func (t *Target) checkNative() error {
	for name := range t.Native {
		if name == AllFaults {
			continue
		}
		if _, ok := placements[name]; !ok {
			return fmt.Errorf("faults.native: %q is not a lab fault (known: %s)", name, strings.Join(FaultNames(), ", "))
		}
	}
	return nil
}

// Missing returns the required programs not found, and what to install.
func (t *Target) Missing() (missing []string, hint string) {
	for _, p := range t.Requires {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	hint = t.Install
	if hint == "" {
		hint = "install " + strings.Join(missing, ", ")
	}
	return missing, hint
}

// Package target holds what the lab knows of a service it did not write: a
// folder targets/NAME/ with target.json (schema/target.schema.json). It
// loads and checks target.json, digests the folder, runs its setup once per
// digest, expands the start command's placeholders, places each lab fault
// (place.go), and reads the versions of the code under test. Package
// caserun runs a target's replicas.
package target

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"idemlab/internal/audit/strict"
	"idemlab/internal/audit/uuidv5"
	"idemlab/internal/protocol"
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
	Attach   *Attach // non-nil: a service already running; Start is empty
	Request  Request
	Replay   *Replay // nil: the target marks no replay
	Effects  Effects
	Native   map[string]NativeFault // lab fault name (or "*") → the target's header
	Claims   Claims
	Services []Service
	Versions Versions
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

// Attach is a service its user started: the lab proxies Upstream and its
// sink listens on SinkAddr, which the service calls for its effects.
type Attach struct {
	URL      string // http://HOST:PORT as target.json gives it
	Upstream string // HOST:PORT, what the proxy dials
	SinkAddr string // 127.0.0.1:PORT
}

// NoProcessControl is why a case that restarts, stops or crashes a process,
// or runs replicas, does not run on an attached target.
const NoProcessControl = "attached, no process control"

// Request is how the lab's clients call the target.
type Request struct {
	Method      string
	Path        string
	KeyHeader   string
	ContentType string
	KeyFormat   KeyFormat // how a case's key is written for the target
}

// A KeyFormat is how the lab writes a case's key for a target.
type KeyFormat string

// The key formats (request.key_format).
const (
	KeyVerbatim KeyFormat = "verbatim" // as the case file writes it (the default)
	// KeyUUID: every key the lab's own server accepts is sent as a UUID
	// derived from it (UUIDKey), the same for every call of that key; a
	// key it refuses as malformed is sent as written, for the case tests
	// that refusal.
	KeyUUID KeyFormat = "uuid"
)

// Key is the key the lab sends a target in format f for a case's key k.
func (f KeyFormat) Key(k string) string {
	if f == KeyUUID && keyWord.MatchString(k) {
		return UUIDKey(k)
	}
	return k
}

// keyWord is a key the lab's own server accepts, written bare
// (protocol.KeyPattern).
var keyWord = regexp.MustCompile(`^` + protocol.KeyPattern + `$`)

// keyNamespace is the name-based UUID namespace of the case keys: the
// version 5 UUID of the URL https://idemlab.invalid/case-key in the URL
// namespace (RFC 9562, section 6.6).
var keyNamespace = uuidv5.Of(uuidv5.URL, "https://idemlab.invalid/case-key")

// UUIDKey is the version 5 (name-based, SHA-1) UUID of key word k in the
// lab's namespace, in its canonical lower-case text form: a function of k
// alone, so every call of a key, on every run, sends the same UUID.
func UUIDKey(k string) string { return uuidv5.Of(keyNamespace, k) }

// Replay is the header and value by which the target marks a replay.
type Replay struct {
	Header string `json:"header"`
	Value  string `json:"value"`
}

// Effects says how the effects applied are counted: by the sink, or by a
// command run after every process of the run exited.
type Effects struct {
	Sink      bool
	KeyHeader string // with Sink: the header the target forwards its key in (effects.sink.key_header, or request.key_header)
	Count     []string
	Journal   []string // prints the effects applied (store.State's JSON), for chaos
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
	KeyTTLMS    *int64 `json:"key_ttl_ms"` // a key expires this long after its request; nil: never, or none claimed
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
	Attach *struct {
		URL      string `json:"url"`
		SinkAddr string `json:"sink_addr"`
	} `json:"attach"`
	Request struct {
		Method      string    `json:"method"`
		Path        string    `json:"path"`
		KeyHeader   string    `json:"key_header"`
		ContentType *string   `json:"content_type"`
		KeyFormat   KeyFormat `json:"key_format"`
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
	t.Effects = f.effects()
	if f.Attach != nil {
		switch {
		case len(f.Setup) > 0, len(f.Services) > 0:
			return nil, errors.New("attach: an attached service is set up and started by its user, side services too: no setup, no services")
		case !t.Effects.Sink:
			return nil, errors.New("attach: an attached service performs its effects at the lab's sink (effects \"sink\"): no count command runs against a service the lab did not start")
		}
		if err := t.attach(f.Attach.URL, f.Attach.SinkAddr); err != nil {
			return nil, err
		}
		return t, t.checkNative()
	}
	re, err := f.readyLine()
	if err != nil {
		return nil, err
	}
	t.Start.ReadyLine = re
	portFromLine := re != nil && re.NumSubexp() == 1
	probe := f.Start.Ready.TCP || f.Start.Ready.HTTP != ""
	if err := t.checkPlaceholders(portFromLine, probe); err != nil {
		return nil, err
	}
	if err := t.checkNative(); err != nil {
		return nil, err
	}
	return t, nil
}

// newTarget copies what target.json says as written, with the defaults
// for the method, content type and start bounds it leaves out.
func (f *file) newTarget() *Target {
	t := &Target{
		Name: f.Name, Summary: f.Summary, Requires: f.Requires, Install: f.Install, Setup: f.Setup,
		Replay: f.Replay, Native: f.Faults.Native, Claims: f.Claims, Services: f.Services,
		Versions: f.Versions,
		Start: Start{Argv: f.Start.Argv, Env: f.Start.Env, ReadyHTTP: f.Start.Ready.HTTP,
			ReadyWithin: DefaultReadyWithin, StopGrace: DefaultStopGrace},
		Request: Request{Method: cmp.Or(f.Request.Method, "POST"), Path: f.Request.Path, KeyHeader: f.Request.KeyHeader, ContentType: "text/plain",
			KeyFormat: cmp.Or(f.Request.KeyFormat, KeyVerbatim)},
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

// effects reads "sink", {"sink": {"key_header": H}}, or a count command
// and optionally a journal command (the schema admits no other form). The
// sink reads a forwarded key from H, by default the request's key header.
func (f *file) effects() Effects {
	var c struct {
		Sink *struct {
			KeyHeader string `json:"key_header"`
		} `json:"sink"`
		Count   []string `json:"count"`
		Journal []string `json:"journal"`
	}
	switch json.Unmarshal(f.Effects, &c); {
	case string(bytes.TrimSpace(f.Effects)) == `"sink"`:
		return Effects{Sink: true, KeyHeader: f.Request.KeyHeader}
	case c.Sink != nil:
		return Effects{Sink: true, KeyHeader: cmp.Or(c.Sink.KeyHeader, f.Request.KeyHeader)}
	}
	return Effects{Count: c.Count, Journal: c.Journal}
}

// checkPlaceholders checks that every placeholder of the commands is one
// the lab fills, that the effects commands, run once every process exited,
// take no {port}, that only a target whose effects the sink counts is told
// {effect_url} (there is no sink otherwise), and that {port} is given to
// the target unless its ready line reports the port it chose
// (portFromLine, which needs no probe).
func (t *Target) checkPlaceholders(portFromLine, probe bool) error {
	type field struct {
		where, value string
		after        bool // an effects command's
	}
	var fields []field
	add := func(where string, args []string, after bool) {
		for i, a := range args {
			fields = append(fields, field{fmt.Sprintf("%s[%d]", where, i), a, after})
		}
	}
	add("start.argv", t.Start.Argv, false)
	for _, k := range slices.Sorted(maps.Keys(t.Start.Env)) {
		fields = append(fields, field{"start.env." + k, t.Start.Env[k], false})
	}
	add("effects.count", t.Effects.Count, true)
	add("effects.journal", t.Effects.Journal, true)
	known, toldPort, portAfter := t.placeholders(), false, false
	for _, f := range fields {
		for _, m := range placeholderRE.FindAllString(f.value, -1) {
			if !slices.Contains(known, m) {
				return fmt.Errorf("%s: unknown placeholder %s (known: %s)", f.where, m, strings.Join(known, " "))
			}
			if m == EffectURLPlaceholder && !t.Effects.Sink {
				return fmt.Errorf("%s: %s is the effect sink's URL, and the target has no sink: its effects are counted by effects.count (give \"effects\": \"sink\" to call the sink)", f.where, m)
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

// attach checks an attached service's addresses (the schema has their
// shape) and sets t.Attach.
func (t *Target) attach(rawURL, sinkAddr string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("attach.url: %w", err)
	}
	for what, hostPort := range map[string]string{"attach.url": u.Host, "attach.sink_addr": sinkAddr} {
		_, port, err := net.SplitHostPort(hostPort)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%s: port %s: want 1..65535", what, port)
		}
	}
	t.Attach = &Attach{URL: rawURL, Upstream: u.Host, SinkAddr: sinkAddr}
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

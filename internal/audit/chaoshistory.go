package audit

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"idemlab/internal/audit/chaosplan"
	"idemlab/internal/audit/strict"
)

// A chaosHistory is what the audit keeps of one history while streaming
// it, never the lines: per intent 104 bytes (64, and 40 for the
// consistency checks), its key and two index slots; per acknowledgement
// 40 bytes and its reply's value; per effect of an intent 32 bytes; per
// server event 48 bytes. Server events are counted as they are read, and
// so are effects whose body no intent sent (their findings kept as
// chaosFindings keeps them).
type chaosHistory struct {
	version       int64  // history_version: 3 records sink_fired on attempts
	store, target string // exactly one is set
	trial         int    // which chaos trial on the target, from 1 (chaos.json's, not the header's); 0 on a store
	claims        chaosClaims
	seed          uint64
	replicas      int
	clients       int
	// The schedule's parameters, and when the phases began (µs).
	durationMS, killEveryMS    int64
	faultKinds                 []string // the header's faults: the kinds the schedule placed
	chaosStartUS, quietStartUS int64
	endUS                      int64 // the latest time an attempt or event line names
	effectEndUS                int64 // the latest time an effect was applied, where the journal says
	timed                      bool  // every effect says when it was applied (a sink's journal)

	intents  chunked[chaosIntent] // in the order of their first attempt
	byNumber indexTable           // intent number -> index in intents
	bySHA    indexTable           // body SHA-256 -> index in intents
	acks     chunked[chaosAck]    // every 200 reply, in start order
	text     textArena            // the intents' keys and the replies' values
	hashSeed maphash.Seed

	attempts, chaosAttempts, quietAttempts, ok, fail, info, faulted int64
	quietIntents                                                    int64 // intents with a quiet-phase attempt
	faults                                                          map[string]int64
	// sinkFired is, by an attempt's fault, the attempts for which a fault
	// was armed at the effect sink ([0]) and those in which it fired ([1])
	// (history_version 3; judged against the target in chaosfired.go).
	sinkFired  map[string]*[2]int64
	sinkFaults map[string]SinkFault // by kind, once checkSinkFired judged sinkFired

	events                                     int64 // server event lines
	kills, restarts, startFailures, cleanStops int64
	killsSkipped, faultKills                   int64
	exits                                      map[int64]int64 // exit events by exit code
	started                                    []bool          // per replica: a start seen

	places  []chaosPlace
	applied chunked[chaosApplied] // every effect whose body an intent sent, in journal order
	unknown chaosFindings         // unknown_effect, found while reading the effects

	// What the consistency checks keep (chaos_consistency.go).
	sched        chaosplan.Schedule // the plan the history was run with
	serverEvents []chaosEvent       // every server event, in order
	issues       []chaosIssue
}

type chaosIntent struct {
	number   int64
	sha      [32]byte // its body's SHA-256
	key      textRef
	firstAck int32 // index in acks of its first 200, -1 if none
	times    int32 // its effects in the journal
	quiet    bool  // attempted in the quiet phase
	rules    uint8 // bit r: rule chaosRules[r] fired about it (set by check)

	// Its attempts so far, in order, and its effects per place, for the
	// consistency checks (chaos_consistency.go): 40 bytes more.
	lastEnd        int64             // the end of its last attempt
	next           int32             // the number its next attempt must carry
	chaosN, quietN uint16            // its attempts in each phase (saturating)
	lastPhase      int8              // its last attempt's phase: 0 none, 1 chaos, 2 quiet
	apply          [maxPlaced]uint16 // per replica, attempts that may have applied it (no reply, or a 2xx not replayed)
	effectsAt      [maxPlaced]uint16 // per place, its effects in the journal
}

type chaosAck struct {
	start, end, attempt int64
	value               textRef
	intent              int32 // index in intents
	replica             int16
	replayed            int8  // -1 null, 0 false, 1 true
	earlier             uint8 // a replayed reply's: the replicas (bits) of its intent's earlier attempts that may have applied it
}

func (h *chaosHistory) bySum(sum [32]byte) (int32, bool) {
	return h.bySHA.find(maphash.Bytes(h.hashSeed, sum[:]), func(i int32) bool { return h.intents.at(i).sha == sum })
}

func (h *chaosHistory) byNum(n int64) (int32, bool) {
	return h.byNumber.find(maphash.Comparable(h.hashSeed, n), func(i int32) bool { return h.intents.at(i).number == n })
}

// addIntent adds intent number n with its body's SHA-256 and key.
func (h *chaosHistory) addIntent(n int64, sum [32]byte, key []byte) int32 {
	i := h.intents.add(chaosIntent{number: n, sha: sum, key: h.text.add(key), firstAck: -1})
	h.byNumber.insert(maphash.Comparable(h.hashSeed, n), i, func(j int32) uint64 { return maphash.Comparable(h.hashSeed, h.intents.at(j).number) })
	h.bySHA.insert(maphash.Bytes(h.hashSeed, sum[:]), i, func(j int32) uint64 { sum := h.intents.at(j).sha; return maphash.Bytes(h.hashSeed, sum[:]) })
	return i
}

type chaosPlace struct {
	place    int64
	replicas []int64
	counter  int64
	effects  int64 // its effect lines
	// badAt is the first effect (from 1) whose value is not its position,
	// badValue that value; badAt is 0 when every value is.
	badAt, badValue int64
}

// chaosApplied is one effect of an intent: its place and value, when it
// was applied, when the sink received the call and from which replica
// (µs, µs, replica; -1 where the journal does not say: a store's).
type chaosApplied struct {
	value   int64
	at      int64
	called  int64
	intent  int32 // index in intents
	place   int16
	replica int16
}

// Line shapes: each kind's members, all required, none other.
var chaosLineFields = map[string][]string{
	"run": {"kind", "history_version", "store", "target", "claims", "seed", "replicas", "clients", "duration_ms", "kill_every_ms", "faults",
		"chaos_start_us", "quiet_start_us", "attempts", "server_events", "places"},
	"attempt": {"kind", "intent", "key", "body_sha256", "client", "replica", "attempt", "phase", "start_us", "end_us", "fault", "type", "outcome", "status", "value", "replayed", "error"},
	"event":   {"kind", "replica", "at_us", "pid", "addr", "exit_code", "planned", "error"},
	"place":   {"kind", "place", "replicas", "counter", "effects"},
	"effect":  {"kind", "place", "value", "body_sha256", "key", "replica", "at_us", "called_us"},
}

var chaosEventKinds = []string{"start", "start_failed", "kill", "kill_skipped", "fault_kill", "exit", "stop"}

// chaosMaxClients bounds a history's clients (the lab's bound).
const chaosMaxClients = 64

// plannedKills is the nemesis's plan (h.sched's) for a chaos phase of
// durationMS, a kill every everyMS on average.
func (h *chaosHistory) plannedKills(durationMS, everyMS int64) []chaosplan.Kill {
	return h.sched.Kills(time.Duration(durationMS)*time.Millisecond, time.Duration(everyMS)*time.Millisecond)
}

// targetName is what a target's name may be (schema/target.schema.json).
var targetName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,47}$`)

// A lineReader reads one history line's members, with its line number.
// A line whose values are all numbers, literals and strings without
// escapes (every attempt, event and effect line the runner writes) is
// read in place, by strict.Flat, with no allocation; any other is decoded
// by decodeJSON, which reads it (or refuses it) exactly as a whole
// document, and read from the map it makes.
type lineReader struct {
	no   int
	kind string
	flat strict.Flat
	obj  map[string]any // the line decoded, when flat could not read it
	err  error
}

// read reads line number no; an error is decodeJSON's.
func (l *lineReader) read(no int, line []byte) error {
	*l = lineReader{no: no, flat: strict.Flat{Members: l.flat.Members[:0]}}
	if !l.flat.Read(line) {
		v, err := decodeJSON(line, capLineJSON)
		obj, _ := v.(map[string]any)
		if err != nil || obj == nil {
			return fmt.Errorf("line %d: not a JSON object: %v", no, err)
		}
		l.obj = obj
	}
	if k := l.get("kind"); k.kind == 's' {
		l.kind = lineKind(k.text)
	}
	return nil
}

// lineKinds are the kinds there are: the lines' shapes and the server
// events'.
var lineKinds = append(slices.Collect(maps.Keys(chaosLineFields)), chaosEventKinds...)

// lineKind returns the kind named by text, without allocating for the
// kinds there are.
func lineKind(text []byte) string {
	for _, k := range lineKinds {
		if string(text) == k {
			return k
		}
	}
	return string(text)
}

// A lineValue is one member's value: kind 's' a string (text its
// contents), 'n' a number (text its digits), 't' true, 'f' false, 'z'
// null, 'o' an array or object (v), 0 no such member.
type lineValue struct {
	kind byte
	text []byte
	v    any
}

func (l *lineReader) get(name string) lineValue {
	if l.obj == nil {
		kind, text := l.flat.Get(name)
		return lineValue{kind: kind, text: text}
	}
	v, ok := l.obj[name]
	switch v := v.(type) {
	case string:
		return lineValue{kind: 's', text: []byte(v)}
	case json.Number:
		return lineValue{kind: 'n', text: []byte(v)}
	case bool:
		if v {
			return lineValue{kind: 't'}
		}
		return lineValue{kind: 'f'}
	case nil:
		if ok {
			return lineValue{kind: 'z'}
		}
		return lineValue{}
	}
	return lineValue{kind: 'o', v: v}
}

// unknownMember returns the name of a member not among fields, nil if
// there is none: the first in the line when it was read in place, else
// the first by name (a map's order would name any, from run to run).
func (l *lineReader) unknownMember(fields []string) []byte {
	if l.obj == nil {
		for _, m := range l.flat.Members {
			if !slices.ContainsFunc(fields, func(f string) bool { return f == string(m.Name) }) {
				return m.Name
			}
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(l.obj)) {
		if !slices.Contains(fields, k) {
			return []byte(k)
		}
	}
	return nil
}

// render prints member name's value as render does a decoded one.
func (l *lineReader) render(name string) string {
	switch v := l.get(name); v.kind {
	case 's':
		return render(string(v.text))
	case 'n':
		return render(json.Number(v.text))
	case 't':
		return "true"
	case 'f':
		return "false"
	case 'o':
		return render(v.v)
	}
	return "null"
}

func (l *lineReader) failf(format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf("line %d (%s): %s", l.no, l.kind, fmt.Sprintf(format, args...))
	}
}

// int reads an integer member in [lo, hi].
func (l *lineReader) int(name string, lo, hi int64) int64 {
	v := l.get(name)
	if v.kind != 'n' {
		l.failf("%s: want an integer", name)
		return 0
	}
	i, err := strconv.ParseInt(string(v.text), 10, 64)
	if err != nil || i < lo || i > hi {
		l.failf("%s: %s: want an integer in %d..%d", name, v.text, lo, hi)
	}
	return i
}

// bytes reads a string member; the bytes are valid until the next line.
func (l *lineReader) bytes(name string) []byte {
	v := l.get(name)
	if v.kind != 's' {
		l.failf("%s: want a string", name)
	}
	return v.text
}

func (l *lineReader) str(name string) string { return string(l.bytes(name)) }

// boolOrNull reads a member that is true (1), false (0) or null (-1, and
// -1 when it is none of them).
func (l *lineReader) boolOrNull(name string) int8 {
	switch l.get(name).kind {
	case 't':
		return 1
	case 'f':
		return 0
	case 'z':
	default:
		l.failf("%s: want true, false or null", name)
	}
	return -1
}

// sha reads a SHA-256 written as 64 lowercase hex digits.
func (l *lineReader) sha(name string) (text []byte, sum [32]byte) {
	s := l.bytes(name)
	if len(s) != 64 || bytes.ContainsFunc(s, func(r rune) bool { return (r < '0' || r > '9') && (r < 'a' || r > 'f') }) {
		l.failf("%s: %q: want 64 lowercase hex digits", name, s)
		return s, sum
	}
	hex.Decode(sum[:], s)
	return s, sum
}

const maxInt = 1<<63 - 1

// readChaosHistory reads a history strictly, line by line: a "run" header
// first (history_version 2 or 3), then attempt and server-event lines in time
// order, then per place a "place" line and exactly the effect lines it
// announces; every line one JSON object (strict: no duplicate member,
// valid UTF-8) with exactly its kind's members, each of its type and
// range; the header's counts equal the lines. An error names the line.
func readChaosHistory(r io.Reader) (*chaosHistory, error) {
	br := bufio.NewReaderSize(r, maxHistoryLine)
	hr := &historyReader{h: &chaosHistory{hashSeed: maphash.MakeSeed(), faults: map[string]int64{}, sinkFired: map[string]*[2]int64{}, exits: map[int64]int64{}, timed: true}}
	for {
		line, err := hr.next(br)
		if err != nil {
			return nil, err
		}
		if line == nil {
			return hr.end()
		}
		if err := hr.line(line); err != nil {
			return nil, err
		}
	}
}

// historyReader is readChaosHistory's state from one line to the next.
type historyReader struct {
	h           *chaosHistory
	l           lineReader
	no          int   // the line number
	size        int64 // bytes read
	seenHeader  bool
	lastTime    int64 // the time of the last attempt or event line
	effectsLeft int64 // effect lines the last place line announced and are still to come
	// What the header announces.
	hdrAttempts, hdrEvents, hdrPlaces int64
}

// next returns the next line, nil at the end.
func (hr *historyReader) next(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return nil, fmt.Errorf("line %d: longer than %d bytes", hr.no+1, maxHistoryLine)
	case err == io.EOF && len(line) == 0:
		return nil, nil
	case err != nil && err != io.EOF:
		return nil, fmt.Errorf("line %d: %v", hr.no+1, err)
	}
	hr.no++
	if hr.size += int64(len(line)); hr.size > CapHistory {
		return nil, fmt.Errorf("over the cap of %d bytes", CapHistory)
	}
	if err == io.EOF {
		return nil, fmt.Errorf("line %d: no final newline", hr.no)
	}
	return line, nil
}

// line reads one line into the history.
func (hr *historyReader) line(line []byte) error {
	l := &hr.l
	if err := l.read(hr.no, line); err != nil {
		return err
	}
	shape, err := hr.shape()
	if err != nil {
		return err
	}
	inPlaces := len(hr.h.places) > 0
	switch {
	case !hr.seenHeader && shape != "run":
		return fmt.Errorf("line %d: want the \"run\" header first, got kind %q", hr.no, l.kind)
	case shape == "run" && hr.seenHeader:
		return fmt.Errorf("line %d: a second \"run\" header", hr.no)
	case shape == "attempt" && inPlaces:
		return fmt.Errorf("line %d: an attempt after the place lines", hr.no)
	case shape == "event" && inPlaces:
		return fmt.Errorf("line %d: a server event after the place lines", hr.no)
	case shape == "place" && hr.effectsLeft != 0:
		return fmt.Errorf("line %d: place line while %d effect lines of the place above are missing", hr.no, hr.effectsLeft)
	case shape == "effect" && (!inPlaces || hr.effectsLeft == 0):
		return fmt.Errorf("line %d: an effect line its place line does not announce", hr.no)
	}
	lineReaders[shape](hr)
	return l.err
}

// lineReaders reads each shape of line into the history.
var lineReaders = map[string]func(*historyReader){
	"run": (*historyReader).header, "attempt": (*historyReader).attempt, "event": (*historyReader).event,
	"place": (*historyReader).place, "effect": (*historyReader).effect,
}

// shape is the line's shape (a server event's kind is "event"), once its
// kind is known and its members are exactly its shape's.
func (hr *historyReader) shape() (string, error) {
	l := &hr.l
	shape := l.kind
	if slices.Contains(chaosEventKinds, shape) {
		shape = "event"
	}
	// "event" names the shape of the server event lines, not a kind a
	// line may carry: such a line would pass as an event of no kind.
	fields, known := chaosLineFields[shape]
	if !known || l.kind == "event" {
		return "", fmt.Errorf("line %d: unknown kind %s", hr.no, l.render("kind"))
	}
	if shape == "attempt" && hr.h.version >= 3 {
		fields = attemptFieldsV3
	}
	if unknown := l.unknownMember(fields); unknown != nil {
		return "", fmt.Errorf("line %d (%s): unknown member %q", hr.no, l.kind, unknown)
	}
	for _, k := range fields {
		if l.get(k).kind == 0 {
			return "", fmt.Errorf("line %d (%s): missing member %q", hr.no, l.kind, k)
		}
	}
	return shape, nil
}

// header reads the "run" line: what ran, its claims, the seed and the
// schedule's parameters, and how many lines of each kind follow.
func (hr *historyReader) header() {
	l, h := &hr.l, hr.h
	hr.seenHeader = true
	h.version = l.int("history_version", 2, HistoryVersionMax)
	h.store, h.target = l.str("store"), l.str("target")
	switch {
	case h.target == "" && !slices.Contains(StoreOrder, h.store):
		l.failf("store %q: want one of %s, or a target", h.store, strings.Join(StoreOrder, ", "))
	case h.target != "" && (h.store != "" || !targetName.MatchString(h.target)):
		l.failf("store %q, target %q: want a store or a target's name, not both", h.store, h.target)
	}
	cl, _ := l.get("claims").v.(map[string]any)
	d, dok := cl["durable"].(bool)
	sh, sok := cl["shared_store"].(bool)
	if len(cl) != 2 || !dok || !sok {
		l.failf("claims: want {\"durable\": bool, \"shared_store\": bool}")
	}
	h.claims = chaosClaims{d, sh}
	h.seed = l.uint("seed")
	h.replicas = int(l.int("replicas", 1, 1000))
	h.started = make([]bool, h.replicas)
	h.clients = int(l.int("clients", 1, chaosMaxClients))
	h.durationMS = l.int("duration_ms", 0, maxInt)
	h.killEveryMS = l.int("kill_every_ms", -maxInt, maxInt)
	h.chaosStartUS = l.int("chaos_start_us", 0, maxInt)
	h.quietStartUS = l.int("quiet_start_us", 0, maxInt)
	h.faultKinds = hr.faultKinds()
	h.sched = chaosplan.Schedule{Seed: h.seed, Replicas: h.replicas, Faults: h.faultKinds}
	hr.hdrAttempts = l.int("attempts", 0, maxInt)
	hr.hdrEvents = l.int("server_events", 0, maxInt)
	hr.hdrPlaces = l.int("places", 0, 1000)
}

// uint reads an unsigned integer member.
func (l *lineReader) uint(name string) uint64 {
	n := l.get(name)
	if n.kind != 'n' {
		l.failf("%s: want an integer", name)
		return 0
	}
	u, err := strconv.ParseUint(string(n.text), 10, 64)
	if err != nil {
		l.failf("%s: %s: want an unsigned integer", name, n.text)
	}
	return u
}

// faultKinds reads the header's fault kinds: each a kind the schedule
// draws, once.
func (hr *historyReader) faultKinds() []string {
	l := &hr.l
	fs, ok := l.get("faults").v.([]any)
	if !ok {
		l.failf("faults: want an array of fault kinds")
	}
	out := []string{}
	for _, f := range fs {
		k, _ := f.(string)
		if !slices.Contains(chaosplan.FaultKinds, k) || slices.Contains(out, k) {
			l.failf("faults: %s: want fault kinds (%s), each once", render(f), strings.Join(chaosplan.FaultKinds, ", "))
			break
		}
		out = append(out, k)
	}
	return out
}

// event reads a server event line.
func (hr *historyReader) event() {
	l, h := &hr.l, hr.h
	rep := l.int("replica", 0, int64(h.replicas-1))
	at := l.int("at_us", 0, maxInt)
	l.int("pid", 0, maxInt)
	l.bytes("addr")
	code := l.int("exit_code", -1, 255)
	planned := l.int("planned", -1, chaosplan.MaxKills-1)
	why := l.bytes("error")
	if at < hr.lastTime {
		l.failf("at_us %d: before the line above (%d µs): lines must be in time order", at, hr.lastTime)
	}
	if kill := l.kind == "kill" || l.kind == "kill_skipped"; kill != (planned >= 0) {
		l.failf("planned %d: a kill or kill_skipped event names its planned kill (0 or more), any other -1", planned)
	}
	hr.lastTime = at
	h.endUS = max(h.endUS, at)
	if l.err != nil {
		return
	}
	h.event(l.kind, rep, code)
	reason := int8(-1) // why a planned kill did not land: an index in chaosplan.SkipReasons
	if l.kind == "kill_skipped" {
		reason = int8(slices.Index(chaosplan.SkipReasons, string(why)))
	}
	h.serverEvents = append(h.serverEvents, chaosEvent{kind: l.kind, replica: rep, code: code, at: at, planned: planned, reason: reason, no: hr.no})
}

// place reads a place line.
func (hr *historyReader) place() {
	l, h := &hr.l, hr.h
	p := chaosPlace{place: l.int("place", 0, 1000), counter: l.int("counter", 0, maxInt)}
	hr.effectsLeft = l.int("effects", 0, maxInt)
	reps, ok := l.get("replicas").v.([]any)
	if !ok {
		l.failf("replicas: want an array")
	}
	for _, r := range reps {
		n, _ := r.(json.Number)
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || i < 0 || i >= int64(h.replicas) {
			l.failf("replicas: %s: want a replica 0..%d", render(r), h.replicas-1)
		}
		p.replicas = append(p.replicas, i)
	}
	if slices.ContainsFunc(h.places, func(q chaosPlace) bool { return q.place == p.place }) {
		l.failf("place %d: a second place line", p.place)
	}
	h.places = append(h.places, p)
}

// effect reads an effect line of the last place.
func (hr *historyReader) effect() {
	l, h := &hr.l, hr.h
	p := &h.places[len(h.places)-1]
	if pl := l.int("place", 0, 1000); pl != p.place {
		l.failf("place %d: an effect of place %d among place %d's lines", pl, pl, p.place)
	}
	value := l.int("value", 0, maxInt)
	text, sum := l.sha("body_sha256")
	if k := l.get("key").kind; k != 's' && k != 'z' {
		l.failf("key: want a string or null")
	}
	at, called, rep := int64(-1), int64(-1), int64(-1)
	switch rk, ak, ck := l.get("replica").kind, l.get("at_us").kind, l.get("called_us").kind; {
	case rk == 'z' && ak == 'z' && ck == 'z':
	case rk == 'z' || ak == 'z' || ck == 'z':
		l.failf("replica, at_us and called_us: all known (a sink's journal) or all null (a store's)")
	default:
		rep, at, called = l.int("replica", 0, int64(h.replicas-1)), l.int("at_us", 0, maxInt), l.int("called_us", 0, maxInt)
		h.effectEndUS = max(h.effectEndUS, at)
		if called > at {
			l.failf("called_us %d after at_us %d: the sink receives a call before it applies its effect", called, at)
		}
	}
	h.timed = h.timed && at >= 0
	hr.effectsLeft--
	if l.err == nil {
		h.effect(p, chaosApplied{value: value, at: at, called: called, replica: int16(rep)}, text, sum)
	}
}

// end checks the history as a whole once every line is read.
func (hr *historyReader) end() (*chaosHistory, error) {
	h := hr.h
	switch {
	case !hr.seenHeader:
		return nil, errors.New("empty: no \"run\" header")
	case hr.effectsLeft != 0:
		return nil, fmt.Errorf("place %d: %d announced effect lines missing at the end", h.places[len(h.places)-1].place, hr.effectsLeft)
	case h.attempts != hr.hdrAttempts || h.events != hr.hdrEvents || int64(len(h.places)) != hr.hdrPlaces:
		return nil, fmt.Errorf("%d attempt lines, %d server events, %d places; the run header announces %d, %d, %d",
			h.attempts, h.events, len(h.places), hr.hdrAttempts, hr.hdrEvents, hr.hdrPlaces)
	}
	h.timed = h.timed && len(h.places) > 0
	return h, nil
}

// event counts one server event line, valid, of replica rep.
func (h *chaosHistory) event(kind string, rep, code int64) {
	h.events++
	switch kind {
	case "kill":
		h.kills++
	case "kill_skipped":
		h.killsSkipped++
	case "fault_kill":
		h.faultKills++
	case "exit":
		h.exits[code]++
	case "start":
		if h.started[rep] {
			h.restarts++
		}
		h.started[rep] = true
	case "start_failed":
		h.startFailures++
	case "stop":
		// A clean stop exits 0; a target may also end by the SIGTERM
		// itself (143), as most runtimes do by default.
		if code == 0 || h.target != "" && code == 143 {
			h.cleanStops++
		}
	}
}

// effect reads one effect line, valid, of place p: its position in the
// place, then whose body it applied (an unknown_effect if none's).
func (h *chaosHistory) effect(p *chaosPlace, ap chaosApplied, text []byte, sum [32]byte) {
	p.effects++
	if p.badAt == 0 && ap.value != p.effects {
		p.badAt, p.badValue = p.effects, ap.value
	}
	n, ok := h.bySum(sum)
	if !ok {
		h.unknown.add("unknown_effect", -1, func() (string, string) {
			return "", fmt.Sprintf("place %d: effect %d has body SHA-256 %s, which no intent sent", p.place, ap.value, text)
		})
		return
	}
	in := h.intents.at(n)
	in.times++
	if p.place < maxPlaced && in.effectsAt[p.place] < 1<<16-1 {
		in.effectsAt[p.place]++
	}
	ap.intent, ap.place = n, int16(p.place)
	h.applied.add(ap)
}

// attempt reads one attempt line into the history: its members, its outcome's type,
// its faults; then, the line being valid, its intent (checked against the
// intent's attempts before it, chaos_consistency.go) and the counts.
func (hr *historyReader) attempt() {
	l, h := &hr.l, hr.h
	a := h.readAttempt(l, &hr.lastTime)
	checkType(l, a)
	h.countFaults(l, a.fault)
	if l.err != nil {
		return // the line is refused: what it says is not kept
	}
	i, ok := h.intentOf(l, a)
	if !ok {
		return
	}
	in := h.intents.at(i)
	earlier := h.attemptInOrder(l.no, a.intent, in, a) // chaos_consistency.go
	h.attempts++
	if !a.chaos {
		h.quietAttempts++
		if !in.quiet {
			in.quiet = true
			h.quietIntents++
		}
	} else {
		h.chaosAttempts++
	}
	switch a.typ {
	case "ok":
		h.ok++
		k := h.acks.add(chaosAck{start: a.start, end: a.end, attempt: a.attempt, value: h.text.add(a.value), intent: i, replica: int16(a.replica), replayed: a.replayed, earlier: earlier})
		if in.firstAck < 0 {
			in.firstAck = k
		}
	case "fail":
		h.fail++
	default:
		h.info++
	}
}

// readAttempt reads an attempt line's members, each of its type and range,
// its phase, and its times in order.
func (h *chaosHistory) readAttempt(l *lineReader, lastTime *int64) chaosLine {
	var a chaosLine
	a.intent = l.int("intent", 0, maxInt)
	a.key = l.bytes("key")
	_, a.sum = l.sha("body_sha256")
	l.int("client", 0, int64(h.clients-1))
	a.replica = l.int("replica", 0, int64(h.replicas-1))
	a.attempt = l.int("attempt", 0, maxInt)
	phase := l.bytes("phase")
	a.chaos = string(phase) == "chaos"
	a.start, a.end = l.int("start_us", 0, maxInt), l.int("end_us", 0, maxInt)
	a.fault, a.typ, a.outcome = l.bytes("fault"), l.str("type"), l.bytes("outcome")
	a.status = l.int("status", 0, 599)
	a.value, a.errText = l.bytes("value"), l.bytes("error")
	a.replayed = l.boolOrNull("replayed")
	if h.version >= 3 {
		h.readSinkFired(l, a.fault)
	}
	switch {
	case !a.chaos && string(phase) != "quiet":
		l.failf("phase %q: want chaos or quiet", phase)
	case a.end < a.start:
		l.failf("end_us %d before start_us %d", a.end, a.start)
	case a.start < *lastTime:
		l.failf("start_us %d: before the line above (%d µs): lines must be in time order", a.start, *lastTime)
	}
	*lastTime = a.start
	h.endUS = max(h.endUS, a.end)
	return a
}

// checkType checks an attempt's type against its outcome, in Jepsen's
// terms: a reply is ok (2xx: success is any 2xx, as in the cases), info (unknown) at 500 or above (a server
// error may follow an applied effect), else fail; no reply is fail when
// refused (nothing listened), else info.
func checkType(l *lineReader, a chaosLine) {
	wantType := ""
	switch string(a.outcome) {
	case "reply":
		if a.status < 100 || len(a.errText) != 0 {
			l.failf("outcome reply with status %d and error %q", a.status, a.errText)
		}
		switch {
		case a.status >= 200 && a.status < 300:
			wantType = "ok"
		case a.status >= 500:
			wantType = "info"
		default:
			wantType = "fail"
		}
	case "refused", "no_reply", "timeout":
		if a.status != 0 || len(a.value) != 0 || a.replayed >= 0 {
			l.failf("outcome %s (no reply) with status %d, value %q or a replay marker", a.outcome, a.status, a.value)
		}
		wantType = "info"
		if string(a.outcome) == "refused" {
			wantType = "fail"
		}
	default:
		l.failf("outcome %q: want reply, refused, no_reply or timeout", a.outcome)
	}
	if a.typ != wantType {
		l.failf("type %q: outcome %s with status %d is %q", a.typ, a.outcome, a.status, wantType)
	}
}

// countFaults counts the faults an attempt carried: a list of the plan's
// kinds, each with "=NNms" where it takes one.
func (h *chaosHistory) countFaults(l *lineReader, fault []byte) {
	if len(fault) == 0 {
		return
	}
	for f := range bytes.SplitSeq(fault, []byte(",")) {
		name, arg, hasArg := bytes.Cut(f, []byte("="))
		k := slices.IndexFunc(chaosplan.FaultKinds, func(c string) bool { return c == string(name) })
		ok := k >= 0 && chaosplan.TakesArg(string(name)) == hasArg
		if hasArg {
			ms, err := strconv.Atoi(string(bytes.TrimSuffix(arg, []byte("ms"))))
			ok = ok && bytes.HasSuffix(arg, []byte("ms")) && err == nil && ms >= 0
		}
		if !ok {
			l.failf("fault %q: %q is not a fault", fault, f)
			break
		}
		h.faults[chaosplan.FaultKinds[k]]++
	}
	h.faulted++
}

// intentOf returns the intent an attempt is of, added at its first
// attempt (checked as the lab's intent, chaos_consistency.go); false when
// the attempt's key or body is not its intent's.
func (h *chaosHistory) intentOf(l *lineReader, a chaosLine) (int32, bool) {
	i, seen := h.byNum(a.intent)
	if seen {
		if in := h.intents.at(i); !bytes.Equal(h.text.bytes(in.key), a.key) || in.sha != a.sum {
			l.failf("intent %d: key or body_sha256 differs from its first attempt", a.intent)
			return 0, false
		}
		return i, true
	}
	if other, dup := h.bySum(a.sum); dup {
		l.failf("intent %d: body_sha256 of intent %d (each intent has its own body)", a.intent, h.intents.at(other).number)
		return 0, false
	}
	i = h.addIntent(a.intent, a.sum, a.key)
	h.firstAttempt(l.no, a.intent, a.key, a.sum) // chaos_consistency.go
	return i, true
}

// A chaosFinding is one rule firing (intent -1: about the journal).
type chaosFinding struct {
	rule   string
	intent int64
	key    string
	detail string
}

// keepFindings is how many findings of each rule chaosFindings keeps:
// the most any report shows (chaos.json lists 100 findings; the audit
// prints maxChaosLines a rule).
const keepFindings = 100

// chaosFindings counts the findings of each rule and keeps the first
// keepFindings of them in (intent, detail) order, whatever their number:
// a detail is written only when it could be among those.
type chaosFindings struct {
	rules map[string]*ruleFindings
}

type ruleFindings struct {
	fired  int64
	kept   []chaosFinding // unsorted; at most 2·keepFindings
	full   bool           // kept holds keepFindings that sort before any intent above cutoff
	cutoff int64
}

// add counts one finding of rule about intent, text writing its key and
// detail.
func (f *chaosFindings) add(rule string, intent int64, text func() (key, detail string)) {
	if f.rules == nil {
		f.rules = map[string]*ruleFindings{}
	}
	r := f.rules[rule]
	if r == nil {
		r = &ruleFindings{}
		f.rules[rule] = r
	}
	r.fired++
	if r.full && intent > r.cutoff {
		return
	}
	key, detail := text()
	r.kept = append(r.kept, chaosFinding{rule, intent, key, detail})
	if len(r.kept) == 2*keepFindings {
		r.trim()
	}
}

// trim sorts kept and keeps its first keepFindings.
func (r *ruleFindings) trim() {
	slices.SortFunc(r.kept, func(x, y chaosFinding) int {
		return cmp.Or(cmp.Compare(x.intent, y.intent), cmp.Compare(x.detail, y.detail))
	})
	if len(r.kept) >= keepFindings {
		clear(r.kept[keepFindings:])
		r.kept = r.kept[:keepFindings]
		r.full, r.cutoff = true, r.kept[keepFindings-1].intent
	}
}

func (f *chaosFindings) fired(rule string) int64 {
	if r := f.rules[rule]; r != nil {
		return r.fired
	}
	return 0
}

// sorted returns the findings kept, in rule order, then intent, then
// detail.
func (f *chaosFindings) sorted() []chaosFinding {
	var out []chaosFinding
	for _, rule := range chaosRules {
		if r := f.rules[rule]; r != nil {
			r.trim()
			out = append(out, r.kept...)
		}
	}
	return out
}

// clone returns a copy of f that adds to neither.
func (f *chaosFindings) clone() chaosFindings {
	c := chaosFindings{rules: map[string]*ruleFindings{}}
	for rule, r := range f.rules {
		c.rules[rule] = &ruleFindings{r.fired, slices.Clone(r.kept), r.full, r.cutoff}
	}
	return c
}

// chaosCheck is what the audit's checker derives from a history.
type chaosCheck struct {
	counts   map[string]int64
	faults   map[string]int64
	fired    map[string]int64 // findings of each rule
	findings []chaosFinding   // the first keepFindings of each rule, in rule order, then intent
	// What the timeline shows of the findings: how many (rule, intent)
	// pairs fired, and the first tlMaxListed of them, those of promised
	// rules first, then by rule, then by intent.
	markCount int64
	marks     []tlMark
}

// check judges h against its own journal, by the rules the chaos
// experiment documents (internal/chaos), written here from those rules:
//
//   - the journal: each effect's body was sent by an intent
//     (unknown_effect); each place's effects are 1..counter in order, each
//     replica at exactly one place (bad_journal);
//   - per intent (named by its body's SHA-256, which the journal keeps):
//     applied n times over every place; n ≥ 2 is a duplicate; acknowledged
//     (a 2xx) with n = 0 a lost acknowledgement; never acknowledged stuck;
//   - per 200, with n ≥ 1: its value must be one of the intent's effects at
//     the place of the replica that replied (value_mismatch), and, where
//     the journal says when each effect was applied (a sink's), of an
//     effect applied before the reply ended (a replay carries the value of
//     an effect that happened earlier);
//   - per place, over the non-replayed 200s: no value twice (value_reused),
//     and a reply that began after another ended carries a larger value
//     (value_order: one finding per earlier reply whose value is exceeded,
//     the culprit being the largest value ended before each reply began).
//
// What is a violation is the claims' word (promised): no duplicate
// only where the keys are durable (and shared, with several replicas).
//
// The journal numbers the effects in the only order a counter's
// increments can be linearized in, so these rules are the whole
// linearizability check: no search over orders is needed.
func (h *chaosHistory) check(crashCode int64) chaosCheck {
	j := &chaosJudge{h: h, found: h.unknown.clone(), eff: h.effectsByIntent()}
	placeOf, effects := j.journal()
	order := make([]int32, h.intents.n) // the intents by number
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(x, y int32) int { return cmp.Compare(h.intents.at(x).number, h.intents.at(y).number) })
	tally := j.intents(order)
	values, perPlace := j.acks(placeOf)
	for _, pl := range sortedKeys(perPlace) {
		j.valueOrder(pl, perPlace[pl], values)
		delete(perPlace, pl)
	}
	c := chaosCheck{counts: h.counts(tally, effects, crashCode, values), faults: map[string]int64{}, fired: map[string]int64{}}
	c.markCount, c.marks = h.timelineMarks(order, j.eff)
	c.findings = j.found.sorted()
	for _, rule := range chaosRules {
		c.fired[rule] = j.found.fired(rule)
	}
	for _, f := range chaosplan.FaultKinds {
		c.faults[f] = h.faults[f]
	}
	return c
}

// chaosJudge is check's state: the findings so far, and the journal's
// effects by intent.
type chaosJudge struct {
	h     *chaosHistory
	found chaosFindings
	eff   *intentEffects
}

// add adds a finding of rule about intent i, detail writing its detail
// (only if the finding could be kept), and marks the intent.
func (j *chaosJudge) add(rule string, i int32, detail func() string) {
	in := j.h.intents.at(i)
	in.rules |= 1 << slices.Index(chaosRules, rule)
	j.found.add(rule, in.number, func() (string, string) { return j.h.text.text(in.key), detail() })
}

func (j *chaosJudge) addf(rule string, i int32, format string, args ...any) {
	j.add(rule, i, func() string { return fmt.Sprintf(format, args...) })
}

// journal checks the journal itself (bad_journal), and returns each
// replica's place and the effects over every place.
func (j *chaosJudge) journal() (placeOf map[int64]int64, effects int64) {
	bad := func(format string, args ...any) {
		j.found.add("bad_journal", -1, func() (string, string) { return "", fmt.Sprintf(format, args...) })
	}
	placeOf = map[int64]int64{}
	for _, p := range j.h.places {
		for _, r := range p.replicas {
			if old, dup := placeOf[r]; dup {
				bad("replica %d listed at places %d and %d", r, old, p.place)
			}
			placeOf[r] = p.place
		}
		if p.effects != p.counter {
			bad("place %d: counter %d, %d effects journaled", p.place, p.counter, p.effects)
		}
		if p.badAt != 0 {
			bad("place %d: effect %d has value %d", p.place, p.badAt, p.badValue)
		}
		effects += p.effects
	}
	for r := int64(0); r < int64(j.h.replicas); r++ {
		if _, ok := placeOf[r]; !ok {
			bad("replica %d has no place", r)
		}
	}
	return placeOf, effects
}

// chaosTally counts the intents by how often the journal applied them
// and whether they were acknowledged.
type chaosTally struct{ once, dups, notApplied, acked, lost, stuck int64 }

// intents judges each intent, in order, by its effects and its first 200:
// duplicate, lost_ack, stuck.
func (j *chaosJudge) intents(order []int32) (t chaosTally) {
	h := j.h
	for _, i := range order {
		in := h.intents.at(i)
		times := in.times
		switch {
		case times == 0:
			t.notApplied++
		case times == 1:
			t.once++
		default:
			t.dups++
			j.add("duplicate", i, func() string {
				return fmt.Sprintf("applied %d times (%s)%s", times, j.eff.whereOf(i), j.eff.howDuplicated(i))
			})
		}
		switch {
		case in.firstAck < 0:
			t.stuck++
			j.addf("stuck", i, "never acknowledged; applied %d times", times)
		case times == 0:
			t.acked++
			t.lost++
			a := h.acks.at(in.firstAck)
			j.add("lost_ack", i, func() string {
				return fmt.Sprintf("attempt %d on replica %d got 200 %q, and the journal holds no effect of it", a.attempt, a.replica, h.text.text(a.value))
			})
		default:
			t.acked++
		}
	}
	return t
}

// acks checks each 200's value against its intent's effects
// (value_mismatch), and returns every 200's value and the non-replayed
// 200s of each place, in start order (the lines').
func (j *chaosJudge) acks(placeOf map[int64]int64) ([]int64, map[int64][]int32) {
	h := j.h
	values := make([]int64, h.acks.n)
	perPlace := map[int64][]int32{}
	for i := range h.acks.n {
		a := h.acks.at(i)
		v, err := strconv.ParseInt(string(h.text.bytes(a.value)), 10, 64)
		values[i] = v
		pl, ok := placeOf[int64(a.replica)]
		in := h.intents.at(a.intent)
		at, has := j.eff.at(a.intent, pl, v)
		switch {
		case in.times == 0:
		case err != nil || !ok || !has:
			j.add("value_mismatch", a.intent, func() string {
				return fmt.Sprintf("attempt %d on replica %d got 200 %q; the intent's effects: %s", a.attempt, a.replica, h.text.text(a.value), j.eff.whereOf(a.intent))
			})
		case at > a.end:
			// A reply carries an effect that happened before it ended.
			j.add("value_mismatch", a.intent, func() string {
				return fmt.Sprintf("attempt %d on replica %d got 200 %q ending at %d µs, the value of an effect applied at %d µs", a.attempt, a.replica, h.text.text(a.value), a.end, at)
			})
		}
		if a.replayed != 0 || err != nil || !ok {
			continue
		}
		perPlace[pl] = append(perPlace[pl], i)
	}
	return values, perPlace
}

// valueOrder checks the non-replayed 200s of place pl (byStart, in start
// order; values, every 200's value): value_reused, value_order.
func (j *chaosJudge) valueOrder(pl int64, byStart []int32, values []int64) {
	h := j.h
	number := func(i int32) int64 { return h.intents.at(h.acks.at(i).intent).number }
	ack := h.acks.at
	byValue := slices.Clone(byStart)
	slices.SortFunc(byValue, func(x, y int32) int {
		return cmp.Or(cmp.Compare(values[x], values[y]), cmp.Compare(number(x), number(y)), cmp.Compare(ack(x).attempt, ack(y).attempt))
	})
	for k := 1; k < len(byValue); k++ {
		if x, y := byValue[k-1], byValue[k]; values[x] == values[y] {
			j.addf("value_reused", ack(y).intent, "place %d: value %d acknowledged (not replayed) to intent %d attempt %d and intent %d attempt %d", pl, values[y], number(x), ack(x).attempt, number(y), ack(y).attempt)
		}
	}
	byValue = nil
	byEnd := slices.Clone(byStart)
	slices.SortStableFunc(byEnd, func(x, y int32) int { return cmp.Compare(ack(x).end, ack(y).end) })
	smallest := map[int]int32{} // culprit (index in byEnd) -> the reply of smallest value that exceeds it
	k, best := 0, -1
	for _, b := range byStart {
		for ; k < len(byEnd) && ack(byEnd[k]).end < ack(b).start; k++ {
			if best < 0 || values[byEnd[k]] > values[byEnd[best]] {
				best = k
			}
		}
		if best >= 0 && values[byEnd[best]] > values[b] {
			if s, ok := smallest[best]; !ok || values[b] < values[s] {
				smallest[best] = b
			}
		}
	}
	for _, k := range sortedKeys(smallest) {
		x, b := byEnd[k], smallest[k]
		j.addf("value_order", ack(b).intent, "place %d: attempt %d began at %d µs and got value %d, but intent %d was acknowledged value %d at %d µs, before it began",
			pl, ack(b).attempt, ack(b).start, values[b], number(x), values[x], ack(x).end)
	}
}

// counts are chaos.json's counts of h; values, no longer needed, holds
// the 200s' latencies in the end.
func (h *chaosHistory) counts(t chaosTally, effects, crashCode int64, values []int64) map[string]int64 {
	for i := range h.acks.n {
		a := h.acks.at(i)
		values[i] = a.end - a.start
	}
	slices.Sort(values)
	n := map[string]int64{}
	n["intents"], n["acked"], n["applied_once"], n["duplicates"], n["not_applied"], n["lost_acks"], n["stuck"] =
		int64(h.intents.n), t.acked, t.once, t.dups, t.notApplied, t.lost, t.stuck
	n["attempts"], n["chaos_attempts"], n["quiet_attempts"] = h.attempts, h.chaosAttempts, h.quietAttempts
	n["ok"], n["fail"], n["info"], n["faulted_attempts"] = h.ok, h.fail, h.info, h.faulted
	n["effects"] = effects
	n["unresolved_after_chaos"] = h.quietIntents
	n["latency_ok_p50_us"], n["latency_ok_p99_us"] = nearestRank(values, 50), nearestRank(values, 99)
	n["kills"], n["restarts"], n["start_failures"], n["clean_stops"] = h.kills, h.restarts, h.startFailures, h.cleanStops
	n["planned_kills"], n["kills_skipped"], n["fault_kills"] = int64(len(h.plannedKills(h.durationMS, h.killEveryMS))), h.killsSkipped, h.faultKills
	// The lab's server exits with the crash code by itself; a target is
	// killed (fault_kill) instead.
	n["crash_exits"] = 0
	if h.target == "" {
		n["crash_exits"] = h.exits[crashCode]
	}
	return n
}

// intentEffects are the journal's effects grouped by intent: each
// intent's in journal order (so in runs of one place each: a place's
// effects are consecutive lines), and by place and value, to look up.
type intentEffects struct {
	h       *chaosHistory
	start   []int32 // intent i's effects are journal[start[i]:start[i+1]], and byValue's
	journal []int32 // indexes in applied
	byValue []int32
	where   map[int32]string // where of intents of many effects, a few at a time
}

func (h *chaosHistory) effectsByIntent() *intentEffects {
	e := &intentEffects{h: h, start: make([]int32, h.intents.n+1), journal: make([]int32, h.applied.n), where: map[int32]string{}}
	for i := range h.intents.n {
		e.start[i+1] = e.start[i] + h.intents.at(i).times
	}
	next := slices.Clone(e.start[:h.intents.n])
	for k := range h.applied.n {
		ap := h.applied.at(k)
		e.journal[next[ap.intent]] = k
		next[ap.intent]++
	}
	e.byValue = slices.Clone(e.journal)
	slices.SortFunc(e.byValue, func(x, y int32) int {
		a, b := h.applied.at(x), h.applied.at(y)
		return cmp.Or(cmp.Compare(a.intent, b.intent), cmp.Compare(a.place, b.place), cmp.Compare(a.value, b.value))
	})
	return e
}

// at returns when intent i's effect of value v at place pl was applied
// (-1 where the journal does not say), and whether it has one.
func (e *intentEffects) at(i int32, pl, v int64) (int64, bool) {
	ks := e.byValue[e.start[i]:e.start[i+1]]
	k, found := slices.BinarySearchFunc(ks, v, func(k int32, v int64) int {
		ap := e.h.applied.at(k)
		return cmp.Or(cmp.Compare(int64(ap.place), pl), cmp.Compare(ap.value, v))
	})
	if !found {
		return -1, false
	}
	return e.h.applied.at(ks[k]).at, true
}

// values returns intent i's effects' values, over every place, in
// ascending order.
func (e *intentEffects) values(i int32) []int64 {
	vs := []int64{}
	for _, k := range e.journal[e.start[i]:e.start[i+1]] {
		vs = append(vs, e.h.applied.at(k).value)
	}
	slices.Sort(vs)
	return vs
}

// timelineMarks counts the (rule, intent) pairs that fired (the intents'
// rule bits, once check set them) and returns the first tlMaxListed in the
// timeline's order: the rules h's claims promise first, each in rule order,
// its intents by number (order is the intents sorted by number), each
// with what the timeline lists of it.
func (h *chaosHistory) timelineMarks(order []int32, eff *intentEffects) (int64, []tlMark) {
	var count int64
	for _, i := range order {
		count += int64(bits.OnesCount8(h.intents.at(i).rules))
	}
	var marks []tlMark
	for _, promised := range []bool{true, false} {
		for r, rule := range chaosRules {
			if h.promised(rule) != promised {
				continue
			}
			for _, i := range order {
				in := h.intents.at(i)
				if in.rules&(1<<r) == 0 {
					continue
				}
				if len(marks) == tlMaxListed {
					return count, marks
				}
				m := tlMark{rule: rule, intent: in.number, key: h.text.text(in.key), promised: promised, values: eff.values(i)}
				if in.firstAck >= 0 {
					a := h.acks.at(in.firstAck)
					m.ack = &[4]int64{a.start, a.end, a.attempt, int64(a.replica)}
				}
				marks = append(marks, m)
			}
		}
	}
	return count, marks
}

// flag is the timeline's outline colour of intent i: a violation's where
// a rule its claims promise fired about it, else shown where any rule did,
// else "" (and "" when there is no such intent: not found).
func (h *chaosHistory) flag(i int32, found bool) string {
	if !found || h.intents.at(i).rules == 0 {
		return ""
	}
	rules := h.intents.at(i).rules
	for r, rule := range chaosRules {
		if rules&(1<<r) != 0 && h.promised(rule) {
			return tlViolation
		}
	}
	return tlShown
}

// Where an intent's effects are printed, at most maxWherePlaces places
// and maxWhereValues values each, the rest counted.
const maxWherePlaces, maxWhereValues = 10, 10

// whereOf prints intent i's effects: "place 0 values [3 9]; ...", places
// in order, values in journal order. That of an intent with more than 32
// effects is kept for the next finding about it, for the last 1,024 such
// intents at most.
func (e *intentEffects) whereOf(i int32) string {
	ks := e.journal[e.start[i]:e.start[i+1]]
	if s, ok := e.where[i]; ok {
		return s
	}
	type run struct{ place, from, to int }
	var runs []run
	for j, k := range ks {
		pl := int(e.h.applied.at(k).place)
		if len(runs) == 0 || runs[len(runs)-1].place != pl {
			runs = append(runs, run{pl, j, j})
		}
		runs[len(runs)-1].to = j + 1
	}
	slices.SortFunc(runs, func(x, y run) int { return cmp.Compare(x.place, y.place) })
	var parts []string
	for _, r := range runs[:min(len(runs), maxWherePlaces)] {
		vs := make([]int64, 0, maxWhereValues)
		for _, k := range ks[r.from:min(r.to, r.from+maxWhereValues)] {
			vs = append(vs, e.h.applied.at(k).value)
		}
		part := fmt.Sprintf("place %d values %v", r.place, vs)
		if n := r.to - r.from; n > maxWhereValues {
			part += fmt.Sprintf(" and %d more", n-maxWhereValues)
		}
		parts = append(parts, part)
	}
	if len(runs) > maxWherePlaces {
		parts = append(parts, fmt.Sprintf("%d more places", len(runs)-maxWherePlaces))
	}
	s := strings.Join(parts, "; ")
	if len(ks) > 32 {
		if len(e.where) == 1024 {
			clear(e.where)
		}
		e.where[i] = s
	}
	return s
}

// howDuplicated explains, where the journal says from which replica each
// call came and when the sink received it (a sink's), how intent i came to
// be applied again, pair by pair in the order the calls were received (a
// call was sent by the process up when it arrived; the sink may apply it
// much later, which says nothing of who sent it): by two replicas; by a
// replica that started again between the two calls (the process that sent
// the earlier one ended, and its successor did not know the key); or by
// one process, no restart between them (the target ran the effect twice
// itself). "" for a store's journal.
func (e *intentEffects) howDuplicated(i int32) string {
	ks := slices.Clone(e.journal[e.start[i]:e.start[i+1]])
	ap := e.h.applied.at
	if slices.ContainsFunc(ks, func(k int32) bool { return ap(k).called < 0 }) {
		return ""
	}
	slices.SortFunc(ks, func(x, y int32) int {
		return cmp.Or(cmp.Compare(ap(x).called, ap(y).called), cmp.Compare(ap(x).value, ap(y).value))
	})
	var parts []string
	for j := 1; j < len(ks) && len(parts) < maxWhereValues; j++ {
		a, b := ap(ks[j-1]), ap(ks[j])
		switch end, start := e.h.restartBetween(int64(a.replica), a.called, b.called); {
		case a.replica != b.replica:
			parts = append(parts, fmt.Sprintf("values %d and %d by replicas %d and %d", a.value, b.value, a.replica, b.replica))
		case start >= 0:
			parts = append(parts, fmt.Sprintf("values %d and %d by replica %d: the process that sent value %d (received at %d µs) ended at %d µs (%s), and the one started at %d µs sent value %d",
				a.value, b.value, a.replica, a.value, a.called, end.at, end.kind, start, b.value))
		default:
			parts = append(parts, fmt.Sprintf("values %d and %d by one process of replica %d, no restart between them (received at %d and %d µs)", a.value, b.value, a.replica, a.called, b.called))
		}
	}
	return "; " + strings.Join(parts, "; ")
}

// restartBetween returns when replica r started again after from and
// before to, and the event that ended its process before (its first kill,
// fault_kill or exit since it started); start is -1 if it did not.
func (h *chaosHistory) restartBetween(r, from, to int64) (end chaosEvent, start int64) {
	for _, ev := range h.serverEvents {
		switch {
		case ev.replica != r || ev.at >= to:
		case ev.kind == "start" && ev.at > from:
			return end, ev.at
		case ev.kind == "start":
			end = chaosEvent{}
		case end.kind == "" && (ev.kind == "kill" || ev.kind == "fault_kill" || ev.kind == "exit"):
			end = ev
		}
	}
	return end, -1
}

// chunked is an append-only list kept in blocks of chunkLen: it grows
// without copying (appending to one slice holds the old and the new array
// at once, 2.25 times the list at the worst moment).
type chunked[T any] struct {
	blocks [][]T
	n      int32
}

const chunkLen = 1 << 12

// add appends v and returns its index.
func (c *chunked[T]) add(v T) int32 {
	if c.n%chunkLen == 0 {
		c.blocks = append(c.blocks, make([]T, 0, chunkLen))
	}
	b := &c.blocks[len(c.blocks)-1]
	*b = append(*b, v)
	c.n++
	return c.n - 1
}

func (c *chunked[T]) at(i int32) *T { return &c.blocks[i/chunkLen][i%chunkLen] }

// A textArena keeps short texts (keys, reply values) back to back in
// blocks, each named by a textRef: 8 bytes and its bytes, against a
// string's 16 and an allocation of its own. A text is at most a line.
type textArena struct{ blocks [][]byte }

// A textRef is block<<34 | offset<<17 | length.
type textRef uint64

const arenaBlock = 1 << 16 // maxHistoryLine: a text fits one

func (a *textArena) add(s []byte) textRef {
	if len(a.blocks) == 0 || len(a.blocks[len(a.blocks)-1])+len(s) > arenaBlock {
		a.blocks = append(a.blocks, make([]byte, 0, arenaBlock))
	}
	b := &a.blocks[len(a.blocks)-1]
	r := textRef(len(a.blocks)-1)<<34 | textRef(len(*b))<<17 | textRef(len(s))
	*b = append(*b, s...)
	return r
}

func (a *textArena) bytes(r textRef) []byte {
	off := int(r >> 17 & (1<<17 - 1))
	return a.blocks[r>>34][off : off+int(r&(1<<17-1))]
}

func (a *textArena) text(r textRef) string { return string(a.bytes(r)) }

// An indexTable finds an index by a key its caller keeps (the intents'
// numbers and SHA-256 sums): open addressing with linear probing, at most
// half full, 4 bytes a slot, where a Go map of SHA-256 sums takes about
// 60 bytes an entry. The caller hashes with a seeded maphash, so that no
// history can choose keys that collide.
type indexTable struct {
	slots []int32 // index+1; 0 is empty
	n     int
}

// find returns the index whose key hashes to hash and is, if any.
func (t *indexTable) find(hash uint64, is func(int32) bool) (int32, bool) {
	mask := uint64(len(t.slots) - 1)
	for k := hash & mask; len(t.slots) > 0; k = (k + 1) & mask {
		switch s := t.slots[k]; {
		case s == 0:
			return 0, false
		case is(s - 1):
			return s - 1, true
		}
	}
	return 0, false
}

// insert adds index i, whose key hashes to hash; hashOf hashes the key of
// any index in the table, to grow it.
func (t *indexTable) insert(hash uint64, i int32, hashOf func(int32) uint64) {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots = make([]int32, max(64, 2*len(old)))
		for _, s := range old {
			if s != 0 {
				t.put(hashOf(s-1), s)
			}
		}
	}
	t.put(hash, i+1)
	t.n++
}

func (t *indexTable) put(hash uint64, slot int32) {
	mask := uint64(len(t.slots) - 1)
	k := hash & mask
	for t.slots[k] != 0 {
		k = (k + 1) & mask
	}
	t.slots[k] = slot
}

// nearestRank is the nearest-rank p-th percentile of sorted (0 for none).
func nearestRank(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

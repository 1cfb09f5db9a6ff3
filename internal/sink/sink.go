// Package sink is the effect sink: a lab-owned HTTP endpoint that a target's
// handler calls to perform its side effect, as a real service calls a
// payment provider (docs/targets.md, "The sink's contract"). Its journal is
// the ground truth of effects applied: counted from its own records, never
// from replies.
//
// A call is POST /effect/R (R the calling replica, from 0) with the intent's
// body and any headers. Each call the sink accepts applies at most one
// effect: the journal gets an entry with the next sequence number (1, 2, ...,
// no gaps), which is the effect's value, and the reply is 200, Content-Type
// text/plain, the value in decimal. Another method gets 405, another path or
// an unknown replica 404, a body over MaxBody 413: nothing applied.
//
// A key the target forwards in KeyHeader (several lines joined by ", ") is
// honoured as a payment provider honours an idempotency key: the first call
// with a key to reach its effect applies it; a later call with that key and
// the same body applies nothing, is journaled as a replay (Entry.Replayed,
// Seq the first effect's) and answers the first effect's value; one with
// another body applies nothing and is refused with 422 (ReusedBody). The
// sink keeps its keys for its whole life, across replicas: a ledger whose
// keys outlive the run. An empty key is recorded and deduplicates nothing.
//
// The lab places its sink faults by arming an Action for the next call from
// a replica whose body equals the body it forwarded (Arm): wait before
// applying (the owner in flight), apply (or replay) or not, wait after
// applying (the effect done, not yet recorded by the target), then answer,
// fail with 500, kill the calling replica and close the connection
// unanswered, or close it unanswered (the reply dropped).
//
// A call is accepted once its body was read: its effect is applied even if
// the caller goes away while it waits, as a provider that received a request
// processes it. A Kill, though, runs only while the calling connection is
// still open: a caller that is gone may have been restarted since, and
// killing its successor would be a kill nobody planned (Call.Err says so).
//
// Bounds: a call's head (request line, header fields, empty line) at most
// HeaderBytes (431 beyond), read within 30 s; its body at most
// Config.MaxBody, read within 30 s more; its reply written within 150 s of
// its head; a kept-alive connection idle at most 30 s; at most MaxConns
// connections at once (more wait to be accepted); each wait at most
// MaxWait; at most MaxArms arms outstanding per replica. The forwarded keys
// are kept as SHA-256 digests, one per effect applied: no more than the
// journal. Close cancels every wait and returns within 10 s plus the time
// Kills in progress take.
package sink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"idemlab/internal/protocol"
)

// Bounds and defaults.
const (
	MaxReplicas    = 16               // replicas a sink serves, at most
	DefaultMaxBody = 2 << 20          // bytes of a call's body, by default
	MaxMaxBody     = 64 << 20         // the largest Config.MaxBody accepted
	HeaderBytes    = 16 << 10         // bytes of a call's request line and header fields
	MaxConns       = 512              // connections open at once
	MaxWait        = 60 * time.Second // the longest Action.Before or Action.After
	MaxArms        = 1024             // arms not yet taken, per replica
	FailBody       = "effect failed\n"
	// ReusedBody answers a forwarded key reused with another body (422).
	ReusedBody = "idempotency key reused with another body\n"

	readTimeout  = 30 * time.Second // a call's whole request
	idleTimeout  = 30 * time.Second // a kept-alive connection between calls
	writeTimeout = 2*MaxWait + readTimeout
	closeWait    = 10 * time.Second
	// headerSlack is what net/http reads beyond Server.MaxHeaderBytes
	// before it answers 431; the sink subtracts it so that HeaderBytes is
	// the bound a caller meets.
	headerSlack = 4096
)

// An End is how a call ends once its effect was applied (or not).
type End int

// The ends. The zero End is none: an Action must name one.
const (
	Answer End = iota + 1 // 200 with the effect's value
	Fail                  // 500 with FailBody
	Kill                  // kill the calling replica, then close the connection unanswered
	Drop                  // close the connection unanswered: the reply is lost, the replica lives
)

func (e End) String() string {
	switch e {
	case Answer:
		return "answer"
	case Fail:
		return "fail"
	case Kill:
		return "kill"
	case Drop:
		return "drop"
	}
	return "End(" + strconv.Itoa(int(e)) + ")"
}

// An Action is what the sink does with one call.
type Action struct {
	Before time.Duration // wait before applying ("slow", "delay=NNms": the owner in flight)
	Apply  bool          // apply the effect (or replay its forwarded key's): journal it
	After  time.Duration // wait after applying, before End ("stall=NNms": effect done, not yet recorded by the target)
	End    End
}

// Normal is the Action of every call no arm claims.
var Normal = Action{Apply: true, End: Answer}

// Validate reports what is wrong with a, or nil.
func (a Action) Validate() error {
	switch {
	case a.End < Answer || a.End > Drop:
		return fmt.Errorf("sink: action: unknown end %v (want answer, fail, kill or drop)", a.End)
	case a.End == Answer && !a.Apply:
		return errors.New("sink: action: answer without applying: there is no value to answer with")
	case a.Before < 0 || a.Before > MaxWait:
		return fmt.Errorf("sink: action: before %v out of range 0..%v", a.Before, MaxWait)
	case a.After < 0 || a.After > MaxWait:
		return fmt.Errorf("sink: action: after %v out of range 0..%v", a.After, MaxWait)
	}
	return nil
}

// Config configures a sink.
type Config struct {
	Replicas  int               // 1..MaxReplicas
	Kill      func(replica int) // kills replica r of the target with SIGKILL and returns once it exited; required
	KeyHeader string            // header a target forwards its key in; default Idempotency-Key
	MaxBody   int64             // bound on a call's body, 1..MaxMaxBody; default DefaultMaxBody
	Observe   func(Call)        // optional: called once per call that reached the sink's handler, when it ended
}

// An Entry is one effect applied, or one call answered with an effect
// applied before (a replay of its forwarded key).
type Entry struct {
	Seq        int64     `json:"seq"`                // the effect's value: 1, 2, ... in order, no gaps; a replay's, the effect it replays
	Replica    int       `json:"replica"`            // the replica that called
	BodySHA256 string    `json:"body_sha256"`        // hex SHA-256 of the call's body
	Key        *string   `json:"key"`                // the forwarded key (several lines joined by ", "), nil when none
	Replayed   bool      `json:"replayed,omitempty"` // nothing applied: the call's key and body are effect Seq's
	At         time.Time `json:"at"`                 // when it was applied or replayed (UTC, the wall clock)
	// Applied is the same instant, and Received when the sink had read the
	// call's body (before any wait), with their monotonic clock readings,
	// for ordering them against a caller's own clock; not in the JSON.
	Applied  time.Time `json:"-"`
	Received time.Time `json:"-"`
}

// A Call is what the sink did with one call that reached its handler.
type Call struct {
	Replica int    // the replica its path named; -1 when it named none the sink serves
	Status  int    // the reply's status; 0 when the connection was closed unanswered
	Seq     int64  // the effect applied (or replayed) for it; 0 for none
	Replay  bool   // it replayed effect Seq: its forwarded key was applied before, with the same body
	Armed   bool   // it took an armed Action, not Normal
	Action  Action // the Action it took (zero for a call refused before one was chosen)
	Killed  bool   // Kill ran for it
	Err     string // why it ended short of its Action, or ""
	Start   time.Time
	End     time.Time
}

// A Sink is a running effect sink.
type Sink struct {
	cfg  Config
	ln   *protocol.LimitListener
	srv  *http.Server
	port int

	ctx    context.Context // cancelled by Close: ends every wait
	cancel context.CancelFunc
	served chan struct{} // closed when Serve returned

	mu      sync.Mutex
	closed  bool
	handing sync.WaitGroup // handlers running, hijacked ones included
	// fresh: connections that have sent no request yet, which Close
	// closes itself: http.Server.Shutdown waits 5 s for each, as if busy
	fresh   map[net.Conn]struct{}
	journal []Entry
	replays int                           // the journal's replays
	keys    map[[sha256.Size]byte]applied // by the SHA-256 of a forwarded key applied
	arms    [][]*arm                      // per replica, in arm order

	closeOnce sync.Once
	closeErr  error
}

// applied is what the sink keeps of a forwarded key: its effect and body.
type applied struct {
	seq  int64
	body [sha256.Size]byte
}

type arm struct {
	body   []byte
	action Action
	taken  bool // a call took it (under s.mu)
}

// Start validates cfg and starts a sink on 127.0.0.1 at a free port.
func Start(cfg Config) (*Sink, error) {
	if cfg.Replicas < 1 || cfg.Replicas > MaxReplicas {
		return nil, fmt.Errorf("sink: config: replicas %d out of range 1..%d", cfg.Replicas, MaxReplicas)
	}
	if cfg.Kill == nil {
		return nil, errors.New("sink: config: no Kill function")
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = protocol.KeyHeader
	}
	if !protocol.IsFieldName(cfg.KeyHeader) {
		return nil, fmt.Errorf("sink: config: key header %q is not a header name", cfg.KeyHeader)
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxBody < 1 || cfg.MaxBody > MaxMaxBody {
		return nil, fmt.Errorf("sink: config: max body %d out of range 1..%d", cfg.MaxBody, MaxMaxBody)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sink: listen: %w", err)
	}
	s := &Sink{
		cfg:    cfg,
		ln:     protocol.NewLimitListener(inner, MaxConns),
		port:   inner.Addr().(*net.TCPAddr).Port,
		served: make(chan struct{}),
		arms:   make([][]*arm, cfg.Replicas),
		keys:   map[[sha256.Size]byte]applied{},
		fresh:  map[net.Conn]struct{}{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// No ReadTimeout: its deadline would outlive the body and, in the
	// middle of a wait, cancel the request's context as if the caller had
	// gone. The handler bounds the body's read instead.
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		MaxHeaderBytes:    HeaderBytes - headerSlack,
		ReadHeaderTimeout: readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState:         s.track,
	}
	go func() {
		defer close(s.served)
		s.srv.Serve(s.ln) // returns http.ErrServerClosed once Close ran
	}()
	return s, nil
}

// URL returns the URL replica r calls: http://127.0.0.1:PORT/effect/R.
func (s *Sink) URL(replica int) string {
	s.mustServe(replica)
	return fmt.Sprintf("http://127.0.0.1:%d/effect/%d", s.port, replica)
}

// Arm makes the first call from replica whose body equals body, while
// armed, take a instead of Normal. Arms of equal bodies are taken in arm
// order. disarm removes the arm if it was not taken yet, and reports
// whether a call took it (the fault fired): once taken, or disarmed, the
// arm is gone, and a later disarm reports what the first one did.
//
// An arm for a body over MaxBody is never taken: such a call gets 413.
// An invalid Action (see Action.Validate), a replica the sink does not
// serve, or more than MaxArms arms outstanding are programmer errors: Arm
// panics.
func (s *Sink) Arm(replica int, body []byte, a Action) (disarm func() (fired bool)) {
	s.mustServe(replica)
	if err := a.Validate(); err != nil {
		panic(err)
	}
	ar := &arm{body: bytes.Clone(body), action: a}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.arms[replica]) >= MaxArms {
		panic(fmt.Sprintf("sink: arm: replica %d has %d arms outstanding: are disarms missing?", replica, MaxArms))
	}
	s.arms[replica] = append(s.arms[replica], ar)
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.arms[replica] = slices.DeleteFunc(s.arms[replica], func(x *arm) bool { return x == ar })
		return ar.taken
	}
}

// take removes and returns the first arm of replica matching body, or
// Normal.
func (s *Sink) take(replica int, body []byte) (Action, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ar := range s.arms[replica] {
		if bytes.Equal(ar.body, body) {
			ar.taken = true
			s.arms[replica] = slices.Delete(s.arms[replica], i, i+1)
			return ar.action, true
		}
	}
	return Normal, false
}

// mustServe panics unless the sink serves replica.
func (s *Sink) mustServe(replica int) {
	if replica < 0 || replica >= s.cfg.Replicas {
		panic(fmt.Sprintf("sink: replica %d out of range 0..%d", replica, s.cfg.Replicas-1))
	}
}

// Journal returns a copy of the journal, in order: every effect applied
// and every replay.
func (s *Sink) Journal() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.journal...)
}

// Effects returns the entries of journal that applied an effect, in
// sequence order: the journal without its replays.
func Effects(journal []Entry) []Entry {
	var out []Entry
	for _, e := range journal {
		if !e.Replayed {
			out = append(out, e)
		}
	}
	return out
}

// An outcome is what the effect of one call came to.
type outcome int

const (
	appliedNew outcome = iota // a new effect
	replayed                  // its forwarded key's effect, applied before with the same body
	reused                    // its forwarded key was applied with another body: nothing applied
)

// effect applies one effect of a call received then, or replays the one
// its forwarded key applied, journals it and returns its sequence number;
// a key reused with another body applies and journals nothing.
func (s *Sink) effect(replica int, body []byte, key *string, received time.Time) (int64, outcome) {
	sum := sha256.Sum256(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	keyed := key != nil && *key != ""
	var ksum [sha256.Size]byte
	if keyed {
		ksum = sha256.Sum256([]byte(*key))
	}
	e := Entry{Replica: replica, BodySHA256: hex.EncodeToString(sum[:]), Key: key, Received: received}
	switch prev, known := s.keys[ksum]; {
	case keyed && known && prev.body != sum:
		return 0, reused
	case keyed && known:
		e.Seq, e.Replayed = prev.seq, true
	default:
		e.Seq = int64(len(s.journal)-s.replays) + 1
	}
	now := time.Now()
	e.At, e.Applied = now.UTC(), now
	s.journal = append(s.journal, e)
	switch {
	case e.Replayed:
		s.replays++
		return e.Seq, replayed
	case keyed:
		s.keys[ksum] = applied{seq: e.Seq, body: sum}
	}
	return e.Seq, appliedNew
}

// Close stops listening, ends every wait, and waits (at most 10 s, plus
// the Kills in progress) for the handlers. It is safe to call more than
// once; every call returns the first one's result.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for c := range s.fresh {
			c.Close() // its request, if one came now, would be refused
		}
		s.mu.Unlock()
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.srv.Close()
		}
		<-s.served
		handlers := make(chan struct{})
		go func() {
			s.handing.Wait()
			close(handlers)
		}()
		select {
		case <-handlers:
		case <-ctx.Done():
			s.closeErr = fmt.Errorf("sink: close: handlers still running after %v", closeWait)
		}
	})
	return s.closeErr
}

// track keeps the connections that have sent no request yet (fresh), and
// closes one accepted once Close began.
func (s *Sink) track(c net.Conn, state http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case state == http.StateNew && s.closed:
		c.Close()
	case state == http.StateNew:
		s.fresh[c] = struct{}{}
	default:
		delete(s.fresh, c)
	}
}

// enter registers a running handler, or reports false once Close began.
func (s *Sink) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.handing.Add(1)
	return true
}

// errClosed is what a call learns when Close ended its wait.
var errClosed = errors.New("sink closed")

// wait sleeps d, or until Close; it returns errClosed if Close came first.
func (s *Sink) wait(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.ctx.Done():
		return errClosed
	}
}

func (s *Sink) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		reply(w, http.StatusServiceUnavailable, "sink closed\n")
		return
	}
	defer s.handing.Done()
	c := Call{Replica: -1, Start: time.Now()}
	c.Status = s.call(w, r, &c)
	c.End = time.Now()
	if s.cfg.Observe != nil {
		s.cfg.Observe(c)
	}
}

// call handles one call and returns the status it answered (0: none).
func (s *Sink) call(w http.ResponseWriter, r *http.Request, c *Call) int {
	replica, ok := s.replicaOf(r.URL.Path)
	if !ok {
		return reply(w, http.StatusNotFound, "no such effect endpoint\n")
	}
	c.Replica = replica
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return reply(w, http.StatusMethodNotAllowed, "method not allowed: POST only\n")
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(readTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	received := time.Now()
	rc.SetReadDeadline(time.Time{}) // from here on a read ends only when the caller goes
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			c.Err = "body too large"
			return reply(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes\n", s.cfg.MaxBody))
		}
		c.Err = "read body: " + err.Error()
		return reply(w, http.StatusBadRequest, "cannot read body\n")
	}
	var key *string
	if vals := r.Header.Values(s.cfg.KeyHeader); len(vals) > 0 {
		k := strings.Join(vals, ", ")
		key = &k
	}
	a, armed := s.take(replica, body)
	c.Action, c.Armed = a, armed

	if err := s.wait(a.Before); err != nil {
		c.Err = err.Error() + " before the effect"
		return reply(w, http.StatusServiceUnavailable, "sink closed\n")
	}
	reusedKey := false
	if a.Apply {
		var o outcome
		c.Seq, o = s.effect(replica, body, key, received)
		c.Replay, reusedKey = o == replayed, o == reused
		if reusedKey {
			c.Err = "key reused with another body: nothing applied"
		}
	}
	if err := s.wait(a.After); err != nil {
		c.Err = err.Error() + " after the effect"
		return reply(w, http.StatusServiceUnavailable, "sink closed\n")
	}
	switch {
	case a.End == Answer && reusedKey:
		return reply(w, http.StatusUnprocessableEntity, ReusedBody)
	case a.End == Answer:
		return reply(w, http.StatusOK, strconv.FormatInt(c.Seq, 10))
	case a.End == Fail:
		return reply(w, http.StatusInternalServerError, FailBody)
	}
	// Kill and Drop close the connection unanswered; Kill kills only the
	// replica still waiting on this connection.
	gone := r.Context().Err() != nil
	conn, _, err := rc.Hijack()
	if err != nil {
		c.Err = "hijack: " + err.Error()
		return 0
	}
	defer conn.Close()
	switch {
	case a.End == Drop:
		return 0
	case gone:
		c.Err = "caller gone before the kill"
		return 0
	}
	s.cfg.Kill(replica)
	c.Killed = true
	return 0
}

// replicaOf parses the replica of path /effect/R: R decimal, no sign, no
// leading zero, below Replicas.
func (s *Sink) replicaOf(path string) (int, bool) {
	rest, ok := strings.CutPrefix(path, protocol.EffectPath+"/")
	if !ok || rest == "" || len(rest) > 2 || (rest[0] == '0' && len(rest) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return 0, false
		}
		n = n*10 + int(rest[i]-'0')
	}
	return n, n < s.cfg.Replicas
}

// reply writes a text/plain reply and returns its status.
func reply(w http.ResponseWriter, status int, body string) int {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	io.WriteString(w, body)
	return status
}

package effectserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"idemlab/internal/effectserver/faultheader"
	"idemlab/internal/effectserver/registry"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// Fixed reply bodies. The lab records replies byte for byte, so none
// carries a time, an address or a path.
const (
	bodyNotFound         = "not found\n"
	bodyMethodNotAllowed = "method not allowed\n"
	bodyFaultsDisabled   = "X-Lab-Fault: faults are disabled (start the server with -faults)\n"
	bodyUnreadable       = "cannot read request body\n"
	bodyConflict         = "Idempotency-Key already used with another request body\n"
	bodyInProgress       = "request with this Idempotency-Key is still in progress\n"
	bodyFull             = "Idempotency-Key registry is full\n"
	bodyEffectFailed     = "effect failed\n"
	bodyCanceled         = "request canceled while waiting\n"
	bodyUnavailable      = "store unavailable; nothing was recorded, retry\n"
)

// Bounds on a request's log line fields (a probe logged a 1 MB path).
const (
	maxLogField = 256  // each field taken from the request
	maxLogErr   = 1024 // the err field, which may quote a store or the ledger
)

// clip returns s cut to its first n bytes, marked with how long it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

// errCrashed comes back through Apply when a crash fault fired and the
// exit function returned (only in tests).
var errCrashed = errors.New("crash fault fired")

// exchange is what the request log line reports about one request.
type exchange struct {
	r         *http.Request
	start     time.Time
	key       string
	fault     string
	status    int    // 0 when no reply was sent
	replayed  string // "true", "false", or "" when not a 200 from /effect
	outcome   string // "reply", "dropped", "crash" or "cut" (by the end of the shutdown grace)
	takenOver bool   // took over a claim whose lease had ended (downstream)
	err       error
	logged    bool
}

// ServeHTTP handles one request and logs one line about it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.inflight.enter()
	defer s.inflight.leave()
	x := &exchange{r: r, start: time.Now(), outcome: "reply"}
	defer s.logRequest(x)
	s.serve(w, r, x)
}

// logRequest writes the request's log line, once.
func (s *Server) logRequest(x *exchange) {
	if x.logged {
		return
	}
	x.logged = true
	attrs := []slog.Attr{
		slog.String("method", clip(x.r.Method, maxLogField)),
		slog.String("path", clip(x.r.URL.Path, maxLogField)),
		slog.String("key", clip(x.key, maxLogField)),
		slog.String("fault", clip(x.fault, maxLogField)),
		slog.Int("status", x.status),
		slog.String("replayed", x.replayed),
		slog.String("outcome", x.outcome),
	}
	if x.takenOver {
		attrs = append(attrs, slog.Bool("taken_over", true))
	}
	attrs = append(attrs, slog.Duration("duration", time.Since(x.start)))
	level := slog.LevelInfo
	if x.err != nil {
		attrs = append(attrs, slog.String("err", clip(x.err.Error(), maxLogErr)))
		level = slog.LevelError
	}
	s.log.LogAttrs(context.Background(), level, "request", attrs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, x *exchange) {
	if r.URL.Path != protocol.EffectPath {
		s.reply(w, x, http.StatusNotFound, bodyNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.reply(w, x, http.StatusMethodNotAllowed, bodyMethodNotAllowed)
		return
	}
	fault, present, err := faultheader.FromHeader(r.Header)
	switch {
	case present && !s.cfg.Faults:
		s.reply(w, x, http.StatusBadRequest, bodyFaultsDisabled)
		return
	case err != nil:
		s.reply(w, x, http.StatusBadRequest, protocol.FaultHeader+": "+err.Error()+"\n")
		return
	}
	x.fault = fault.Name
	if fault.Downstream() && s.cfg.Downstream == "" {
		s.reply(w, x, http.StatusBadRequest, protocol.FaultHeader+": "+fault.Name+bodyNeedsLedge)
		return
	}
	if fault.RegistryOnly() && s.cfg.Downstream != "" {
		s.reply(w, x, http.StatusBadRequest, protocol.FaultHeader+": "+fault.Name+bodyNotWithLedger)
		return
	}
	key, err := protocol.KeyFromHeader(r.Header)
	if err != nil {
		s.reply(w, x, http.StatusBadRequest, protocol.KeyHeader+": "+err.Error()+"\n")
		return
	}
	x.key = key
	body, status, msg := s.readBody(w, r)
	if status != 0 {
		s.reply(w, x, status, msg)
		return
	}
	in := store.Intent{Key: key, Fingerprint: store.FingerprintOf(body)}
	if s.cfg.Downstream != "" {
		s.downstream(w, x, in, body, fault)
		return
	}

	var ticket registry.Ticket
	if key != "" {
		t, value, err := s.registry.Acquire(r.Context(), key, in.Fingerprint, s.cfg.Wait)
		if status, body, ok := refusal(err); ok {
			s.reply(w, x, status, body)
			return
		}
		switch {
		case err != nil:
			x.err = err
			w.Header().Set(protocol.RetryAfterHeader, "1")
			s.reply(w, x, http.StatusServiceUnavailable, bodyCanceled)
			return
		case t == nil:
			s.replyValue(w, x, value, true)
			return
		}
		ticket = t
		defer ticket.Release() // a no-op once completed
	}
	s.admit(w, x, in, fault, ticket)
}

// refusal maps a registry's or store's refusal to its reply.
func refusal(err error) (status int, body string, ok bool) {
	switch {
	case errors.Is(err, store.ErrConflict):
		return http.StatusUnprocessableEntity, bodyConflict, true
	case errors.Is(err, store.ErrInProgress):
		return http.StatusConflict, bodyInProgress, true
	case errors.Is(err, store.ErrFull):
		return http.StatusTooManyRequests, bodyFull, true
	case errors.Is(err, store.ErrUnavailable):
		return http.StatusServiceUnavailable, bodyUnavailable, true
	}
	return 0, "", false
}

// readBody reads the body; a non-zero status refuses it with msg.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, status int, msg string) {
	tooLarge := "request body larger than " + strconv.FormatInt(s.cfg.MaxBody, 10) + " bytes\n"
	if r.ContentLength > s.cfg.MaxBody {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, http.StatusRequestEntityTooLarge, tooLarge
		}
		return nil, http.StatusBadRequest, bodyUnreadable
	}
	return body, 0, ""
}

// admit runs an admitted request: the owner of its key (ticket != nil) or
// an unkeyed one. Its faults fire here.
func (s *Server) admit(w http.ResponseWriter, x *exchange, in store.Intent, fault faultheader.Fault, ticket registry.Ticket) {
	if s.admitted != nil {
		s.admitted(in.Key)
	}
	if err := s.sleep(fault.Delay); err != nil || s.cutting() {
		cutShort(w, x) // nothing applied; the deferred Release frees the key
		return
	}
	if s.fireCrash(x, fault, faultheader.BeforeEffect) {
		drop(w)
		return
	}
	if fireFail(fault, faultheader.BeforeEffect) {
		x.err = errFailed
		s.reply(w, x, http.StatusInternalServerError, bodyEffectFailed) // the deferred Release frees the key
		return
	}
	res, err := s.store.Apply(in, func() error {
		if err := s.sleep(fault.Stall); err != nil {
			return err
		}
		if s.fireCrash(x, fault, faultheader.AfterEffect) {
			return errCrashed
		}
		if fireFail(fault, faultheader.AfterEffect) {
			return errFailed
		}
		return nil
	})
	// On every error the deferred Release frees the key: the store holds
	// no result of this intent.
	switch {
	case errors.Is(err, errCrashed):
		drop(w)
		return
	case errors.Is(err, errCut):
		cutShort(w, x) // rolled back by a store with a transaction
		return
	case err != nil:
		if status, body, ok := refusal(err); ok {
			if status == http.StatusServiceUnavailable {
				x.err = err // the store's own words go to the log
				w.Header().Set(protocol.RetryAfterHeader, "1")
			}
			s.reply(w, x, status, body)
			return
		}
		x.err = err
		s.reply(w, x, http.StatusInternalServerError, bodyEffectFailed)
		return
	}
	if ticket != nil {
		ticket.Complete(res.Value)
	}
	if res.Replayed { // recorded by another process: no fault fires
		s.replyValue(w, x, res.Value, true)
		return
	}
	s.replyRecorded(w, x, fault, res.Value, ticket)
}

// replyValue sends a 200 carrying the counter value.
func (s *Server) replyValue(w http.ResponseWriter, x *exchange, value int64, replayed bool) {
	x.replayed = strconv.FormatBool(replayed)
	w.Header().Set(protocol.ReplayedHeader, x.replayed)
	s.reply(w, x, http.StatusOK, strconv.FormatInt(value, 10))
}

// reply sends a plain-text reply.
func (s *Server) reply(w http.ResponseWriter, x *exchange, status int, body string) {
	x.status = status
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	io.WriteString(w, body)
}

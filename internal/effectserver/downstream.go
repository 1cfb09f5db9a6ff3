package effectserver

// The downstream mode: the effect is a POST to the ledger, another effect
// server, and no transaction spans it and the store. A keyed request
// commits a leased claim, calls the ledger, then commits its value if the
// claim still holds (see store.Phased). A failed call leaves the claim in
// place: the ledger may have applied, so only a retry after the lease may
// drive it again.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"idemlab/internal/client"
	"idemlab/internal/effectserver/faultheader"
	"idemlab/internal/protocol"
	"idemlab/internal/store"
)

// DefaultLease is how long a claim holds its key unless -lease says otherwise.
const DefaultLease = 5 * time.Second

// DefaultService scopes a forwarded key unless -service says otherwise.
const DefaultService = "effectserver"

// Reply bodies of the downstream mode.
const (
	bodyClaimed       = "request with this Idempotency-Key is claimed by another request until its lease ends; retry after Retry-After seconds\n"
	bodyClaimLost     = "request with this Idempotency-Key was taken over by another request after this one's lease ended\n"
	bodyNeedsLedge    = " acts only on a server started with -downstream\n"
	bodyNotWithLedger = " does not act on a server started with -downstream (its effect is the ledger's)\n"
)

// ForwardedKey is the key the ledger gets for key: "fw-" and the first 40
// hex digits of SHA-256(service ":" key). It is valid whatever the
// client's key, the same on every replica (a takeover replays at the
// ledger), and scoped so two services cannot collide at one ledger.
func ForwardedKey(service, key string) string {
	sum := sha256.Sum256([]byte(service + ":" + key))
	return "fw-" + hex.EncodeToString(sum[:])[:40]
}

// checkDownstream checks the downstream mode's settings.
func checkDownstream(cfg Config) error {
	if cfg.KeyTTL < 0 {
		return fmt.Errorf("-key-ttl %s: want 0 (never) or more", cfg.KeyTTL)
	}
	if cfg.Downstream == "" {
		return nil
	}
	u, err := url.Parse(cfg.Downstream)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.Path != protocol.EffectPath || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("-downstream %s: want http://HOST:PORT%s", cfg.Downstream, protocol.EffectPath)
	}
	if _, err := loopback(u.Host); err != nil {
		return fmt.Errorf("-downstream %s: %w", cfg.Downstream, err)
	}
	if cfg.Lease <= 0 {
		return fmt.Errorf("-lease %s: want more than 0", cfg.Lease)
	}
	if cfg.ForwardKey && cfg.Service == "" {
		return errors.New("-service: want a name (it scopes the forwarded key)")
	}
	return nil
}

// downstream runs a request through claim (keyed only), call, complete
// (keyed only) and the reply; a step that replies ends it.
func (s *Server) downstream(w http.ResponseWriter, x *exchange, in store.Intent, body []byte, fault faultheader.Fault) {
	r := downstreamRequest{s: s, w: w, x: x, in: in, body: body, fault: fault}
	if in.Key != "" && !r.claimKey() {
		return
	}
	if s.admitted != nil {
		s.admitted(in.Key)
	}
	if !r.beforeCall() {
		return
	}
	value, ok := r.call()
	if !ok {
		return
	}
	if in.Key != "" && !r.complete(value) {
		return
	}
	s.replyRecorded(w, x, fault, value, nil)
}

// A downstreamRequest is one request of the downstream mode; each step
// reports false once it has replied or dropped the connection.
type downstreamRequest struct {
	s     *Server
	w     http.ResponseWriter
	x     *exchange
	in    store.Intent
	body  []byte
	fault faultheader.Fault
	claim store.Claim // the claim committed; zero for an unkeyed request
}

// claimKey commits a leased claim on the request's key, or answers.
func (r *downstreamRequest) claimKey() bool {
	s, w, x := r.s, r.w, r.x
	c, err := s.phased.Claim(r.in, s.cfg.Lease)
	if status, msg, ok := refusal(err); ok {
		if status == http.StatusServiceUnavailable {
			x.err = err
		}
		s.reply(w, x, status, msg)
		return false
	}
	if err != nil {
		x.err = err
		s.reply(w, x, http.StatusInternalServerError, bodyEffectFailed)
		return false
	}
	switch c.State {
	case store.Recorded:
		s.replyValue(w, x, c.Value, true)
		return false
	case store.Busy:
		retryAfter(w, c.LeaseUntil)
		s.reply(w, x, http.StatusConflict, bodyClaimed)
		return false
	}
	r.claim = c
	x.takenOver = c.TakenOver
	return true
}

// beforeCall fires the faults due before the ledger is called.
func (r *downstreamRequest) beforeCall() bool {
	s, x := r.s, r.x
	if err := s.sleep(r.fault.Delay); err != nil || s.cutting() {
		if r.in.Key != "" { // the ledger was not called: release at once
			if err := s.phased.Release(r.in.Key, r.claim.Token); err != nil {
				x.err = err
			}
		}
		cutShort(r.w, x)
		return false
	}
	if s.fireCrash(x, r.fault, faultheader.AfterClaim, faultheader.BeforeEffect) {
		drop(r.w)
		return false
	}
	return true
}

// call POSTs the ledger, fires the faults due once it replied, and returns
// its value; a failed call is answered 502.
func (r *downstreamRequest) call() (int64, bool) {
	s, w, x := r.s, r.w, r.x
	value, err := s.callLedger(r.in.Key, r.body, r.fault)
	if err != nil {
		x.err = err // the ledger may have applied: the claim stays
		if r.in.Key != "" {
			retryAfter(w, r.claim.LeaseUntil)
		}
		s.reply(w, x, http.StatusBadGateway, "downstream call failed: "+errorWords(err)+"\n")
		return 0, false
	}
	if err := s.sleep(r.fault.Stall); err != nil {
		cutShort(w, x) // the claim stays, as after a crash here
		return 0, false
	}
	if s.fireCrash(x, r.fault, faultheader.AfterDownstream, faultheader.AfterEffect) {
		drop(w)
		return 0, false
	}
	return value, true
}

// complete commits the ledger's value as the key's result, if this
// request's token still holds the claim.
func (r *downstreamRequest) complete(value int64) bool {
	s, w, x := r.s, r.w, r.x
	err := s.phased.Complete(r.in.Key, r.claim.Token, value)
	switch {
	case errors.Is(err, store.ErrClaimLost):
		s.reply(w, x, http.StatusConflict, bodyClaimLost)
		return false
	case errors.Is(err, store.ErrUnavailable):
		x.err = err
		retryAfter(w, r.claim.LeaseUntil)
		s.reply(w, x, http.StatusServiceUnavailable, bodyUnavailable)
		return false
	case err != nil:
		x.err = err
		s.reply(w, x, http.StatusInternalServerError, bodyEffectFailed)
		return false
	}
	return true
}

// A ledgerError is a downstream call that brought no value back.
type ledgerError struct {
	words string // fixed text for the reply body
	err   error
}

func (e *ledgerError) Error() string { return "downstream: " + e.err.Error() }
func (e *ledgerError) Unwrap() error { return e.err }

// errorWords is the fixed text of a failed downstream call.
func errorWords(err error) string {
	if le, ok := errors.AsType[*ledgerError](err); ok {
		return le.words
	}
	return "error"
}

// callLedger POSTs body to the ledger and returns its value.
func (s *Server) callLedger(key string, body []byte, fault faultheader.Fault) (int64, error) {
	req := client.Request{Body: body}
	if key != "" && s.cfg.ForwardKey {
		fk := ForwardedKey(s.cfg.Service, key)
		req.Key = &fk
	}
	if fault.DropDownstreamReply {
		req.Fault = string(protocol.FaultDropReply)
	}
	rep, err := s.ledger.Post(context.Background(), s.cfg.Downstream, req)
	if err != nil {
		return 0, &ledgerError{words: string(client.Classify(err)), err: err}
	}
	if rep.Status != http.StatusOK {
		return 0, &ledgerError{words: "status " + strconv.Itoa(rep.Status), err: fmt.Errorf("status %d: %q", rep.Status, rep.Body)}
	}
	v, err := strconv.ParseInt(string(rep.Body), 10, 64)
	if err != nil {
		return 0, &ledgerError{words: "unreadable reply", err: fmt.Errorf("reply body %q: %w", rep.Body, err)}
	}
	return v, nil
}

// retryAfter sets Retry-After to the whole seconds, rounded up, until t
// (0 once t has passed).
func retryAfter(w http.ResponseWriter, t time.Time) {
	secs := math.Ceil(time.Until(t).Seconds())
	w.Header().Set(protocol.RetryAfterHeader, strconv.FormatInt(int64(max(secs, 0)), 10))
}

package effectserver

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"idemlab/internal/effectserver/faultheader"
	"idemlab/internal/effectserver/registry"
	"idemlab/internal/protocol"
)

// This file is where each X-Lab-Fault value fires; package faultheader only
// parses the header. A fault fires only for an admitted request (the owner
// of its key, or one without a key), at the point its name says, on the
// registry path (handler.go's admit) and the downstream path (downstream.go):
//
//	delay=NNms, slow        fireDelay: admitted, before the effect
//	stall=NNms              fireStall: effect done, result not yet recorded
//	                        (inside the store's open transaction)
//
// Both sleeps end early when the shutdown grace does (see serve.go): the
// request is then cut, never applied where the store can roll it back.
//	crash-before-effect     fireCrash at BeforeEffect: admitted, nothing applied
//	crash-after-effect      fireCrash at AfterEffect: effect applied, result not recorded
//	crash-after-record      fireCrash at AfterRecord: result recorded, no reply sent
//	crash-after-claim       fireCrash at AfterClaim: claim committed, ledger not called
//	crash-after-downstream  fireCrash at AfterDownstream: ledger replied, result not recorded
//	drop-reply              replyRecorded: applied and recorded, connection closed unanswered
//	fail-effect             fireFail at BeforeEffect: nothing applied, 500, the key released
//	fail-after-effect       fireFail at AfterEffect: effect applied, the handler fails before the
//	                        result is recorded: 500 (a store with a transaction rolls the effect back)
//	drop-downstream-reply   callLedger: the ledger is asked to drop its own reply

// fireDelay sleeps what "delay=NNms" or "slow" asks for. A sleep still
// running when the shutdown grace ends is cut short: it returns errCut.
func (s *Server) fireDelay(f faultheader.Fault) error { return s.sleep(f.Delay) }

// fireStall sleeps what "stall=NNms" asks for: the owner in flight at the
// crash gap, its effect done and its result not yet recorded. Cut short at
// the end of the shutdown grace, it returns errCut, which the store's
// afterEffect hook returns: a store with a transaction rolls the intent
// back (durable, postgres), and the key is released.
func (s *Server) fireStall(f faultheader.Fault) error { return s.sleep(f.Stall) }

// sleep waits d, or until the shutdown grace ends (errCut).
func (s *Server) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.cut:
		return errCut
	}
}

// errCut is what a fault's sleep returns when the shutdown grace ended it.
var errCut = errors.New("cut short at the end of the shutdown grace")

// cutting reports whether the shutdown grace has ended: no new effect starts.
func (s *Server) cutting() bool {
	select {
	case <-s.cut:
		return true
	default:
		return false
	}
}

// cutShort ends a request the end of the shutdown grace cut: logged as
// "cut", its connection closed without a reply (it is closed already, or
// about to be).
func cutShort(w http.ResponseWriter, x *exchange) {
	x.outcome = "cut"
	drop(w)
}

// fireCrash ends the process with protocol.CrashExitCode when f's crash
// point is one of at, and reports whether it fired. The exit returns only
// in tests; the caller then drops the connection, as a real crash would.
func (s *Server) fireCrash(x *exchange, f faultheader.Fault, at ...faultheader.Point) bool {
	if f.Crash == faultheader.NoCrash || !slices.Contains(at, f.Crash) {
		return false
	}
	s.crash(x)
	return true
}

// errFailed is what the effect returns when a fail fault fired.
var errFailed = errors.New("the effect failed (a lab fail fault)")

// fireFail reports whether f makes the effect fail at the point at: the
// caller answers 500 and records nothing, so the key is released.
func fireFail(f faultheader.Fault, at faultheader.Point) bool {
	return f.Fail != faultheader.NoCrash && f.Fail == at
}

// replyRecorded sends value, a new result now recorded, unless f crashes
// the process after the record, or says "drop-reply": then it closes the
// connection without a reply, and a key's ticket (if any) is told the reply
// was lost: a sound registry keeps the record for the retry, a broken one
// may not.
func (s *Server) replyRecorded(w http.ResponseWriter, x *exchange, f faultheader.Fault, value int64, ticket registry.Ticket) {
	switch {
	case s.fireCrash(x, f, faultheader.AfterRecord):
		drop(w)
	case f.DropReply:
		x.outcome = "dropped"
		drop(w)
		if ticket != nil {
			ticket.ReplyLost()
		}
	default:
		s.replyValue(w, x, value, false)
	}
}

// crash logs the request and ends the process with protocol.CrashExitCode. The
// exit function returns only in tests; the caller then drops the
// connection, as a real crash would.
func (s *Server) crash(x *exchange) {
	x.outcome = "crash"
	s.logRequest(x) // the deferred log line never comes after a real exit
	s.exit(protocol.CrashExitCode)
}

// drop closes the connection without writing a reply.
func drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (e.g. HTTP/2 or a recorder): abort the handler,
		// which net/http turns into a closed stream without a reply.
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

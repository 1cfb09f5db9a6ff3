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

// Where each X-Lab-Fault value fires, only for an admitted request, on the
// registry path (admit) and the downstream path:
//
//	delay=NNms, slow        sleep: admitted, before the effect
//	stall=NNms              sleep: effect done, result not yet recorded
//	                        (inside the store's open transaction)
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

// sleep waits d, a delay or stall fault, or until the shutdown grace ends
// (errCut: a cut stall fails afterEffect, so a transactional store rolls
// the intent back).
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

// cutShort ends a request the shutdown grace cut, without a reply.
func cutShort(w http.ResponseWriter, x *exchange) {
	x.outcome = "cut"
	drop(w)
}

// fireCrash crashes the process when f's crash point is one of at, and
// reports whether it fired (the exit returns only in tests).
func (s *Server) fireCrash(x *exchange, f faultheader.Fault, at ...faultheader.Point) bool {
	if f.Crash == faultheader.NoCrash || !slices.Contains(at, f.Crash) {
		return false
	}
	s.crash(x)
	return true
}

// errFailed is what the effect returns when a fail fault fired.
var errFailed = errors.New("the effect failed (a lab fail fault)")

// fireFail reports whether f makes the effect fail at the point at.
func fireFail(f faultheader.Fault, at faultheader.Point) bool {
	return f.Fail != faultheader.NoCrash && f.Fail == at
}

// replyRecorded sends value, a new result now recorded, unless f crashes
// after the record or drops the reply; a dropped reply is told to the
// ticket (a broken registry may lose the record).
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

// crash logs the request and ends the process with protocol.CrashExitCode;
// in tests the exit returns and the caller drops the connection.
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

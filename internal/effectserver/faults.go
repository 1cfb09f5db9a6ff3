package effectserver

import (
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
//	crash-before-effect     fireCrash at BeforeEffect: admitted, nothing applied
//	crash-after-effect      fireCrash at AfterEffect: effect applied, result not recorded
//	crash-after-record      fireCrash at AfterRecord: result recorded, no reply sent
//	crash-after-claim       fireCrash at AfterClaim: claim committed, ledger not called
//	crash-after-downstream  fireCrash at AfterDownstream: ledger replied, result not recorded
//	drop-reply              fireDropReply: applied and recorded, connection closed unanswered
//	drop-downstream-reply   callLedger: the ledger is asked to drop its own reply

// fireDelay sleeps what "delay=NNms" or "slow" asks for.
func fireDelay(f faultheader.Fault) {
	if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
}

// fireStall sleeps what "stall=NNms" asks for: the owner in flight at the
// crash gap, its effect done and its result not yet recorded.
func fireStall(f faultheader.Fault) {
	if f.Stall > 0 {
		time.Sleep(f.Stall)
	}
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

// fireDropReply closes the connection without a reply when f says
// "drop-reply", and reports whether it did. A key's ticket is told the
// reply was lost: a sound registry keeps the record for the retry, a broken
// one may not.
func fireDropReply(w http.ResponseWriter, x *exchange, f faultheader.Fault, ticket registry.Ticket) bool {
	if !f.DropReply {
		return false
	}
	x.outcome = "dropped"
	drop(w)
	if ticket != nil {
		ticket.ReplyLost()
	}
	return true
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

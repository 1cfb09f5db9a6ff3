// Package chaos is the lab's chaos experiment (docs/chaos.md): many
// clients against several replicas, the lab's effectserver on one store or
// a target between its fault proxy and its effect sink, while a seeded
// schedule injects faults and a nemesis kills replicas with SIGKILL. It
// only records; the audit judges the history by what the store or target
// claims.
//
// A run has a chaos phase (clients retry each intent's key until a 2xx,
// each attempt's replica, fault and backoff drawn from the seeded plan in
// internal/audit/chaosplan, which the audit draws again; the nemesis never
// kills the last replica running, and every planned kill is recorded as a
// kill or a kill_skipped with its reason), a quiet phase (no faults, every
// replica up, every unresolved intent retried), then a SIGTERM to every
// replica and a read of the journal of applied effects: the ground truth.
// Every attempt is recorded in Jepsen's terms (ok, fail, or info: outcome
// unknown, never counted as failed), every process event as a ServerEvent,
// all on one clock.
//
// The seed fixes the schedule, not how far a run gets through it: counts
// and latencies depend on timing. What never varies: on the durable and
// postgres stores no duplicate, lost acknowledgement or stuck intent; on
// every store a journal agreeing with its counter and every server
// exiting 0 on the final SIGTERM.
//
// Every wait is bounded (AttemptTimeout, ReadyWithin, StopWithin,
// MaxIntents, MaxHistory, chaosplan.MaxKills), and every process Run
// starts has exited and been reaped when it returns, on every path.
package chaos

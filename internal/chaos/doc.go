// Package chaos is the lab's chaos experiment (docs/chaos.md): many
// clients against several replicas, the lab's effectserver on one store or
// a target (a service the lab did not write, between its fault proxy and
// its effect sink), while a seeded schedule injects faults and a nemesis
// kills replicas with SIGKILL, every attempt recorded in a history beside
// the journal of applied effects (the store's, or the sink's). This
// package only records; the audit judges the history by what the store or
// the target claims.
//
// # A run
//
// On a store, Run starts Config.Replicas servers (real subprocesses,
// loopback only, started with -faults) on the store's places as the case
// runner lays them out; on a target, its replicas through
// caserun.TargetReplicas (one replica unless it claims a shared store).
// Then:
//
//  1. The chaos phase (Config.Duration). Config.Clients clients each take a
//     new intent (its own key and body) and send it with the same key until
//     a 200 reply, at most MaxAttempts times and within IntentWithin. Each
//     attempt's replica, fault and the backoff before it come from the
//     seeded plan (internal/audit/chaosplan, which the audit draws again to
//     check the run kept to it); a fault of a kind the store or target
//     cannot take is not sent. A crash fault makes the lab's server exit
//     with code 23; on a target the proxy or the sink kills the replica's
//     process group (a fault_kill event). The nemesis kills a replica at
//     the times the plan draws, never the last one running when there are
//     several, and restarts it on the same state after the plan's down
//     time; the supervisor restarts a crashed replica after 10 ms. Every
//     planned kill is recorded: a kill, or a kill_skipped event with the
//     reason.
//  2. The quiet phase. Kills stop, every replica is brought up, and every
//     intent without a 200 is retried (no fault, the replicas in turn)
//     until it gets one, QuietAttempts attempts, or QuietWithin has passed:
//     an intent still without a 200 is stuck.
//  3. Every replica is stopped with SIGTERM, and the journal of applied
//     effects is read at every place: the ground truth.
//
// Every attempt is an Attempt in Jepsen's terms (ok, fail, or info:
// outcome unknown, never counted as failed), and every start, kill,
// skipped planned kill, fault's kill, exit and final stop a ServerEvent,
// all on one clock. Result.JSON is one run of chaos.json;
// Result.WriteHistory writes the history as JSON Lines, from which alone
// the audit judges the run and draws its timeline.
//
// # What one seed fixes, and what varies
//
// The seed fixes the schedule: for every (intent, attempt) the replica, the
// fault and the backoff, and the nemesis's kill times, targets and down
// times. It does not fix how far a run gets through it: how many intents
// the clients issue, how many attempts each needs, which attempts meet a
// replica that is down or a crash in flight, whether a kill is skipped
// because its target is already down, and the latencies all depend on
// real timing. What never varies, whatever the timing: on the durable and
// postgres stores no duplicate, no lost acknowledgement and no stuck
// intent; on every store a journal whose counter equals its effects,
// every planned kill landed or skipped with its reason, and every server
// exiting 0 on the final SIGTERM. On a target, what holds is the target's
// own business: its findings are its result.
//
// # Bounds
//
// All traffic is on loopback. Intents are capped by MaxIntents (also the
// servers' -capacity, so that no key meets 429), chaos-phase attempts by
// MaxHistory (Capped says if either cap stopped the clients). Every
// attempt is bounded by AttemptTimeout, every server start by
// ReadyWithin, every stop by StopWithin (then SIGKILL), the kill plan by
// chaosplan.MaxKills. Every process Run starts (a target's whole process
// group, its proxies, the sink and its side services too) has exited and
// been reaped when Run returns, on every path (a cancelled ctx included),
// and the state folder and the postgres database are removed.
package chaos

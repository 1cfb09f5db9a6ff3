// Package chaos is the lab's chaos experiment: many clients against
// several effectserver replicas on one store, while a seeded schedule
// injects faults and a nemesis kills servers with SIGKILL, every attempt
// recorded in a history that a checker judges against the store's own
// journal of applied effects.
//
// # A run
//
// Run starts Config.Replicas servers (real subprocesses, loopback only,
// started with -faults) on one store: durable replicas share one state
// folder, postgres replicas one fresh database (made through
// caserun.Databases), volatile replicas each their own folder, as the case
// runner does. Then:
//
//  1. The chaos phase (Config.Duration). Config.Clients clients each take a
//     new intent (its own key "chaos-N" and its own body, so the journal
//     names the intent by the body's SHA-256), and send it with the same
//     key until a 200 reply, at most MaxAttempts times and within
//     IntentWithin, each attempt with a client timeout of AttemptTimeout.
//     Each attempt's replica, fault (X-Lab-Fault: drop-reply, delay=NNms,
//     slow, stall=NNms, crash-before-effect, crash-after-effect,
//     crash-after-record, and the lists "delay=NNms,drop-reply" and
//     "stall=NNms,crash-after-effect") and the backoff before it come from
//     Schedule.Attempt(intent, attempt), a pure function of the seed. A
//     retry goes to a replica drawn afresh, so it often lands on another
//     replica than the attempt it retries. A crash fault makes that server
//     exit with code 23. The nemesis kills a replica with SIGKILL at the
//     times Schedule.Kills draws (spaced KillEvery on average), never the
//     last one running when there are several, and restarts it on the same
//     state 20 to 200 ms later; the supervisor restarts a crashed replica
//     after 10 ms. A replica keeps its port across restarts.
//  2. The quiet phase. Kills stop, every replica is brought up, and every
//     intent without a 200 is retried (same key, no fault, the replicas in
//     turn) until it gets one, QuietAttempts attempts, or QuietWithin has
//     passed since the phase began: an intent still without a 200 is stuck.
//  3. Every server is stopped with SIGTERM (a clean stop exits 0), and the
//     journal of applied effects is read at every place (open.ReadState):
//     the ground truth.
//
// Every attempt is recorded as an Attempt: intent, key, body SHA-256,
// replica, attempt number, phase, start and end (microseconds on the
// monotonic clock from the run's start), the fault sent, and the outcome
// in Jepsen's terms: ok (a 200, its value and replay marker), fail
// (refused, or another status: this attempt took no effect) or info (no
// reply, or a timeout: outcome unknown, never counted as failed). Each
// start, kill, exit (code 23 after a crash fault, -1 after a kill) and final
// stop of a server is a ServerEvent in the same history, on the same clock.
//
// # The checker
//
// CheckHistory is a pure function of the History (attempts, server events,
// the journal at each place); see its comment for the rules and for why
// they suffice where a general linearizability checker (porcupine) would
// add nothing. Per intent: applied exactly once, applied twice or more
// (duplicate), acknowledged but never applied (lost acknowledgement),
// never acknowledged (stuck). Over the acknowledged values: each is an
// effect of its own intent at its place, the non-replayed ones are unique
// per place and increase with real time. The durable and postgres stores
// promise none of these ever fires; the volatile store, whose keys live in
// one process's memory, promises the same except duplicates, which its
// design predicts after a restart or a retry on another replica: they are
// counted and shown, not violations (Promised).
//
// # Evidence
//
// Result.JSON is chaos.json: seed, parameters, counts, the verdict per
// rule and the first MaxListed findings. Result.WriteHistory writes the
// history as JSON Lines: a "run" header, the attempts and server events in
// time order, then for each place a "place" line (its replicas and
// counter) and its "effect" lines (value, body SHA-256): from that file
// alone ReadHistory and CheckHistory give the verdict again.
//
// # What one seed fixes, and what varies
//
// The seed fixes the schedule: for every (intent, attempt) the replica, the
// fault and the backoff, and the nemesis's kill times, targets and down
// times (TestSchedulePure). It does not fix how far a run gets through it:
// how many intents the clients issue in Duration, how many attempts each
// needs, which attempts meet a replica that is down (refused) or a crash
// in flight, whether a kill is skipped because its target is already down,
// and the latencies all depend on real timing. So intents, attempts, fault
// counts, kills, crash exits, restarts, the ok/fail/info split, the
// volatile store's duplicates, unresolved-after-chaos and p50/p99 vary
// from run to run of one seed. What never varies, whatever the timing: on
// the durable and postgres stores 0 duplicates, 0 lost acknowledgements, 0
// stuck intents, and on every store 0 value findings, 0 unknown effects, a
// journal whose counter equals its effects, every intent counted once as
// applied once, duplicated or not applied, and every server exiting 0 on
// the final SIGTERM. A run that breaks any of these is a finding.
//
// # Bounds
//
// All traffic is on loopback. Intents are capped by MaxIntents (also the
// servers' -capacity, so that no key meets 429), chaos-phase attempts by
// MaxHistory (Capped says if either cap stopped the clients); the quiet
// phase makes at most QuietAttempts per unresolved intent within
// QuietWithin. Every attempt is bounded by AttemptTimeout, every server
// start by ReadyWithin, every stop by StopWithin (then SIGKILL), the kill
// plan by 10,000 kills. Every server Run starts has exited and been reaped
// when Run returns, on every path (a cancelled ctx included), and the
// state folder and the postgres database are removed.
//
// # Measured
//
// On a shared 2-CPU machine, seed 1, 2 replicas, 8 clients, the other
// parameters at their defaults (TestSoak; IDEMLAB_CHAOS_SOAK=3s and =60s):
//
//	store     run   intents attempts faults kills crash-exits dup  lost stuck p50     p99
//	volatile   3 s      959    1,338    293     4          12   56    0     0  6.4 ms 125 ms
//	durable    3 s      776    1,172    249     5          11    0    0     0  4.1 ms 124 ms
//	postgres   3 s      421      710    150     5           7    0    0     0 13.2 ms 237 ms
//	volatile  60 s   11,641   17,857  4,086   103         174  669    0     0  9.9 ms 150 ms
//	durable   60 s   14,035   22,838  5,215    97         215    0    0     0  2.1 ms 134 ms
//	postgres  60 s    9,533   16,533  3,749   103         138    0    0     0  6.8 ms 170 ms
//
// (faults: attempts that carried one; p50/p99: attempts with a 200.)
package chaos

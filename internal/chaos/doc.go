// Package chaos is the lab's chaos experiment: many clients against
// several replicas, the lab's effectserver on one store or a target (a
// service the lab did not write, between its fault proxy and its effect
// sink), while a seeded schedule injects faults and a nemesis kills
// replicas with SIGKILL, every attempt recorded in a history beside the
// journal of applied effects (the store's, or the sink's). The audit
// judges the history by what the store or the target claims; this package
// only records it.
//
// # A run
//
// On a store, Run starts Config.Replicas servers (real subprocesses,
// loopback only, started with -faults): durable replicas share one state
// folder, postgres replicas one fresh database (made through
// caserun.Databases), volatile replicas each their own folder, as the case
// runner does. On a target (Config.Target), it runs the target's replicas
// through caserun.TargetReplicas, the one place that runs them for the
// cases too: each behind its fault proxy (the URL the clients call, kept
// across restarts), all calling one sink, with the run's side services;
// one replica unless the target claims a shared store (Result.ReplicasNote
// says so). A target that counts its effects with a command cannot run
// (NotRunnable): the audit's checker needs the journal per intent. Then:
//
//  1. The chaos phase (Config.Duration). Config.Clients clients each take a
//     new intent (its own key "chaos-N" and its own body, so the journal
//     names the intent by the body's SHA-256), and send it with the same
//     key until a 200 reply, at most MaxAttempts times and within
//     IntentWithin, each attempt with a client timeout of AttemptTimeout.
//     Each attempt's replica, fault (an X-Lab-Fault value) and the backoff
//     before it come from the seeded plan (internal/audit/chaosplan, which
//     the audit draws again to check the run kept to it); a
//     fault of a kind the store or target cannot take (TargetFaults:
//     target.Place; give-up only a target's proxy places) is not sent. A
//     retry goes to a replica drawn afresh, so it often lands on another
//     replica than the attempt it retries. A crash fault makes the lab's
//     server exit with code 23; on a target the proxy or the sink kills
//     the replica's process group (a fault_kill event). The nemesis kills
//     a replica with SIGKILL at the times the plan draws (spaced
//     KillEvery on average), never the last one running when there are
//     several, and restarts it on the same state 20 to 200 ms later; the
//     supervisor restarts a crashed replica after 10 ms, each restart in
//     its own goroutine. Every planned kill is recorded: a kill, or a
//     kill_skipped event with the reason. A replica keeps its URL across
//     restarts.
//  2. The quiet phase. Kills stop, every replica is brought up, and every
//     intent without a 200 is retried (same key, no fault, the replicas in
//     turn) until it gets one, QuietAttempts attempts, or QuietWithin has
//     passed since the phase began: an intent still without a 200 is stuck.
//  3. Every replica is stopped with SIGTERM (a clean stop exits 0; a
//     target's may end by the signal, 143), and the journal of applied
//     effects is read at every place (the store's state, or the sink's
//     journal with each effect's forwarded key, replica and time): the
//     ground truth.
//
// Every attempt is recorded as an Attempt: intent, key, body SHA-256,
// client, replica, attempt number, phase, start and end (microseconds on
// the monotonic clock from the run's start), the fault sent, and the
// outcome in Jepsen's terms: ok (a 200, its value and replay marker), fail
// (refused, or a 4xx: this attempt took no effect) or info (no reply, a
// timeout, or a 5xx: outcome unknown, never counted as failed). Each
// start, kill, skipped planned kill, fault's kill, exit (code 23 after a
// crash fault of the lab's server, 137 after a kill) and final stop is a
// ServerEvent in the same history, on the same clock.
//
// # Evidence
//
// Result.JSON is one run of chaos.json: the store or the target, its
// claims, seed, parameters, the fault kinds the schedule placed, each
// phase's wall time and whether a cap stopped the clients.
// Result.WriteHistory writes the history as JSON Lines: a "run" header
// (what ran, its claims, the seed and every parameter the schedule
// depends on), the attempts and server events in time order, then for
// each place a "place" line (its replicas and counter) and its "effect"
// lines (value, body SHA-256; a sink's also key, replica, time). From
// that file alone the audit judges the run (internal/audit/chaoshistory.go:
// per intent applied once, duplicated, acknowledged but lost, or stuck;
// the acknowledged values against the journal), draws the schedule again
// and draws the timeline a person reads (chaos-NAME.svg).
//
// # What one seed fixes, and what varies
//
// The seed fixes the schedule: for every (intent, attempt) the replica, the
// fault and the backoff, and the nemesis's kill times, targets and down
// times (chaosplan's tests pin them). It does not fix how far a run gets through it:
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
// applied once, duplicated or not applied, every planned kill landed or
// skipped with its reason, and every server exiting 0 on the final
// SIGTERM. A run that breaks any of these is a finding. On a target, what
// holds is the target's own business: its findings are its result.
//
// # Bounds
//
// All traffic is on loopback. Intents are capped by MaxIntents (also the
// servers' -capacity, so that no key meets 429), chaos-phase attempts by
// MaxHistory (Capped says if either cap stopped the clients); the quiet
// phase makes at most QuietAttempts per unresolved intent within
// QuietWithin. Every attempt is bounded by AttemptTimeout, every server
// start by ReadyWithin, every stop by StopWithin (then SIGKILL), the kill
// plan by 10,000 kills. Every process Run starts (a target's whole process
// group, its proxies, the sink and its side services too) has exited and
// been reaped when Run returns, on every path (a cancelled ctx included),
// and the state folder and the postgres database are removed.
//
// # Measured
//
// On a shared 2-CPU machine, seed 1, 2 replicas, 8 clients, the other
// parameters at their defaults (TestSoak; IDEMLAB_CHAOS_SOAK=3s and =60s),
// counted and judged by the audit's checker:
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
//
// On targets, seed 1, 8 clients, the stores' other defaults (runner
// -experiment chaos -target NAME [-duration 60s]); a node target's
// process takes 0.3 to 0.7 s to start again, so a single replica is down
// for much of a short run, and most planned kills find it down:
//
//	target                    run  replicas intents attempts kills (planned) fault-kills dup lost stuck
//	express-idempotency     1.5 s         1     194      409   1 (2)              4      17    0     0
//	node-idempotency-redis  1.5 s         2     165      840   1 (2)              2       0    0    12
//	node-idempotency-redis   60 s         2   6,831   35,097  44 (116)           96       0    0   507
//
// express-idempotency keeps its keys in memory: its duplicates after a
// restart are shown, not violations. node-idempotency-redis keeps them in
// redis, which survives the replicas' kills: no duplicate and no lost
// acknowledgement in 60 s, but a crash (a fault's kill before or after the
// effect) leaves the key in progress in redis for good, and every retry of
// it is answered 409: stuck, a violation (the audit passes: a target's
// findings are its result).
package chaos

// Package chaos is the crash harness: it runs the order system as separate
// processes, feeds it orders, injects faults, and checks the guarantees
// over what happened, in the manner of Jepsen (a recorded history, then
// invariants over it and over the system's state). `ordercast chaos` is its
// command; TestChaosShort runs a short version in the default test suite.
//
// The processes: `ordercast devstack` (the embedded broker and registry,
// persisting to the run's data directory) and, per consumer service,
// Config.Instances processes of `ordercast run SERVICE`, each one member of
// the service's group with a stable member id (its transactional ids) and
// HTTP ports (--http, and --admin-http for its /metrics), plus Config.Checkouts checkout processes. They
// share one SQLite file. A supervisor restarts any process that dies while
// wanted, after 0.3 to 1.5 s.
//
// The workload: the sale invoices of a data set file (real orders, with
// their dirty lines) spread over the first half of the fault phase, and
// synthetic orders at Config.Rate (random catalog lines; a hot set of
// customers, a dozen orders each on average, whose low opening credit runs
// out, so that refusals happen;
// guests; 5% invalid). Each order is sent with its own Idempotency-Key to
// one checkout, and again (same key, next checkout) after any failure or
// 5xx, until checkout answers 202 or a 4xx: the client is at least once and
// checkout's idempotency makes it exactly once.
//
// The faults (Config.Faults): from outside, SIGKILL, SIGTERM, SIGSTOP past
// the session timeout then SIGCONT, scaling a group 1 -> 4 -> 1, and a
// restart of the broker on its data directory; from inside, crash points
// armed through system.EnvFault, where a process SIGKILLs itself with a
// probability: after a consumer's inbox transaction and before its offset
// commit, after fulfillment's transactional output was acknowledged, after
// fulfillment's offsets were added to its transaction (before EndTxn), and
// after the outbox relay's Kafka commit (before it marks its rows); and
// fulfillment sends itself SIGTERM right after a transform, so that a clean
// shutdown starts with its transaction open. The
// harness's choices are seeded (Config.Seed); the crash points and the
// machine's scheduling are not, so a seed fixes the faults, not the records
// they hit.
//
// After Config.Duration the faults stop (crash points disarmed by SIGUSR1 or
// their deadline, every process back, groups at their configured size), the
// client finishes its pending orders, and the harness waits until every
// accepted order went through every service (audit.ReadProgress) and every
// group has no record left past its committed offset. Then it checks, from
// the database, the topics and the history:
//
//   - audit.Check's invariants;
//   - the history: every key answered 202 is the published checkout request
//     of its order, stored exactly once; every rejected key has no order;
//     valid synthetic orders accepted, invalid ones rejected;
//   - charges: every wallet replayed from its opening balance in the order
//     the payments committed — each order charged at most once, exactly once
//     when the credit sufficed at that point, refused only when it did not;
//   - notifications: one per (order, kind), the payment kind matching the
//     payment;
//   - exactly one paymentProcessed per payment and one shipmentRequested per
//     PAID payment for read_committed readers (the log's aborted attempts are
//     counted, not seen);
//   - committed offsets never ahead of applied effects, for every group and
//     partition, sampled during the faults and at the end, and lag 0.
//
// The report counts the faults injected, the crash points hit (from the
// processes' logs) and the redeliveries they caused (inbox duplicates per
// group, aborted transactions, outbox rows recovered from the marker, from
// each process's /metrics, scraped every second and before each signal) —
// the proof that the crash windows were hit.
//
// Also checked: every order answered 202 is in orderCreated for
// read_committed readers (none lost when a broker dies), stored, decided,
// debited at most once and, if paid, shipped once; each DLQ holds exactly the
// records the harness made bad (Config.BadRecords); and, per fault, the time
// from its end until each group committed past the end offsets its topics had
// then (Report.Recoveries).
//
// With Config.Cluster the same run (workload, fault scheduler, checker) goes
// to a real Apache Kafka cluster (scripts/kafka.sh, 3 nodes: RF 3,
// min.insync.replicas 2) and PostgreSQL, with ClusterFaults: Kafka nodes
// SIGKILLed (the active controller among them) and SIGSTOPped past the
// session and request timeouts, PostgreSQL crashed and its connections
// terminated, and, through fault proxies the nodes advertise
// (Cluster.Proxied, internal/faultproxy), latency, resets, requests held past
// the client's timeout and one broker cut off one way. Soak runs seeds in
// turn and tabulates them (SoakTable).
//
// Not covered: clock and disk faults, partitions between the brokers, more
// than one machine.
package chaos

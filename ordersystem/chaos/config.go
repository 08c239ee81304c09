package chaos

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ordercast/ordercast/ordersystem/system"
)

// Faults the harness injects from outside the processes.
const (
	// FaultKill SIGKILLs a random service process; the harness restarts it
	// after a short pause, as a supervisor would.
	FaultKill = "kill"
	// FaultTerm SIGTERMs a random service process (a clean shutdown:
	// drain, commit, leave the group) and restarts it.
	FaultTerm = "term"
	// FaultStop SIGSTOPs a random service process for longer than the
	// session timeout, then SIGCONTs it: a zombie that wakes up after its
	// partitions were given to another member.
	FaultStop = "stop"
	// FaultScale scales one consumer group 1 -> 4 -> 1 member processes,
	// then back to the configured count.
	FaultScale = "scale"
	// FaultBroker restarts the embedded broker and registry (SIGTERM, then
	// `ordercast devstack` again on the same data directory and ports).
	FaultBroker = "broker"
)

// Faults of a run on a real cluster (Config.Cluster).
const (
	// FaultBrokerKill SIGKILLs one Kafka node (every other time the active
	// controller of the KRaft quorum) and starts it again 3 to 6 s later
	// (`kafka.sh start-node`, which waits until it is back in every ISR).
	FaultBrokerKill = "broker-kill"
	// FaultBrokerPause SIGSTOPs one Kafka node for brokerPause, past the
	// controller's broker session timeout (broker.session.timeout.ms, 9 s)
	// and the clients' request timeout (10 s), then SIGCONTs it.
	FaultBrokerPause = "broker-pause"
	// FaultPGRestart crashes and restarts PostgreSQL (`postgres.sh
	// restart`: immediate shutdown, WAL recovery).
	FaultPGRestart = "pg-restart"
	// FaultPGTerminate ends every service connection to PostgreSQL with
	// pg_terminate_backend, under load.
	FaultPGTerminate = "pg-terminate"
	// FaultNetLatency adds 200 to 800 ms to every frame between the
	// clients and one broker (or all), for 5 to 10 s. Needs Cluster.Proxied.
	FaultNetLatency = "net-latency"
	// FaultNetReset resets (TCP RST) every client connection to one broker
	// open now.
	FaultNetReset = "net-reset"
	// FaultNetHold holds one request of a kind that commits (Produce,
	// OffsetCommit, TxnOffsetCommit, EndTxn, AddOffsetsToTxn) for 15 s,
	// past the client's request timeout (10 s), then delivers it to the
	// broker: the late request a client gave up on.
	FaultNetHold = "net-hold"
	// FaultNetOneWay cuts one broker off from the clients one way for 20 s:
	// their requests reach it, its responses are withheld (then released).
	FaultNetOneWay = "net-oneway"
)

// EmbeddedFaults are the process faults of a run on the embedded broker;
// ClusterFaults those of a run on a real cluster (the net-* ones need
// Cluster.Proxied).
var (
	EmbeddedFaults = []string{FaultKill, FaultTerm, FaultStop, FaultScale, FaultBroker}
	ClusterFaults  = []string{FaultKill, FaultTerm, FaultStop, FaultScale, FaultBrokerKill, FaultBrokerPause,
		FaultPGRestart, FaultPGTerminate, FaultNetLatency, FaultNetReset, FaultNetHold, FaultNetOneWay}
)

// netFaults need the fault proxies.
var netFaults = []string{FaultNetLatency, FaultNetReset, FaultNetHold, FaultNetOneWay}

// Faults armed inside the processes (system.EnvFault): each process SIGKILLs
// itself with a probability at that point (term-in-txn: sends itself
// SIGTERM, a clean shutdown starting mid-transaction).
const (
	FaultAfterEffect      = system.FaultAfterEffect
	FaultAfterTxnProduce  = system.FaultAfterTxnProduce
	FaultAfterTxnOffsets  = system.FaultAfterTxnOffsets
	FaultAfterRelayCommit = system.FaultAfterRelayCommit
	FaultTermInTxn        = system.FaultTermInTxn
)

// ProcessFaults are the faults injected from outside, in the order the
// summary lists them.
var ProcessFaults = []string{FaultKill, FaultTerm, FaultStop, FaultScale, FaultBroker, FaultBrokerKill, FaultBrokerPause,
	FaultPGRestart, FaultPGTerminate, FaultNetLatency, FaultNetReset, FaultNetHold, FaultNetOneWay}

// CrashPoints are the faults armed inside the processes, with their default
// probability per pass through the point. Chosen so that a two-minute run on
// two cores hits each a handful of times without keeping the services down.
var CrashPoints = map[string]float64{
	FaultAfterEffect:      0.002,
	FaultAfterTxnProduce:  0.05,
	FaultAfterTxnOffsets:  0.05,
	FaultAfterRelayCommit: 0.02,
	FaultTermInTxn:        0.01,
}

// Services are the consumer services the harness runs as processes, besides
// checkout.
var Services = []string{system.ServiceOrders, system.ServicePayments, system.ServiceNotifications, system.ServiceFulfillment}

// Config configures a harness run. Zero values take the defaults documented
// on each field.
type Config struct {
	// Binary is the ordercast executable that runs `ordercast devstack` and
	// `ordercast run SERVICE`. Required.
	Binary string
	// DataDir holds everything of the run: the broker's log, the registry,
	// the SQLite database, one log file per process (logs/), the history
	// (history.jsonl) and the report (report.json). Required; it should be
	// empty or missing (a used one resumes its orders).
	DataDir string
	// Duration is how long faults are injected while orders flow. Default
	// 2 minutes. Draining and checking come after it.
	Duration time.Duration
	// Seed seeds the harness's random choices (faults, targets, timing,
	// synthetic orders). Default 1. The processes' own crash points and the
	// scheduling of the machine are not seeded, so two runs with one seed
	// inject the same sequence of faults but hit different records.
	Seed int64
	// Instances is the number of processes per consumer service (orders,
	// payments, notifications, fulfillment), each one group member.
	// Default 2.
	Instances int
	// Checkouts is the number of checkout processes the client spreads its
	// requests over. Default 2.
	Checkouts int
	// Faults are the enabled faults: any of EmbeddedFaults (ClusterFaults
	// with Cluster) and of the CrashPoints names. Default: all of them
	// (with Cluster but not Cluster.Proxied, the net-* ones left out).
	Faults []string
	// FaultEvery is the mean pause between two injected process faults
	// (drawn uniformly from [FaultEvery/2, 3*FaultEvery/2]). Default 4s.
	// The first faults are each enabled kind once, in random order; after
	// that the kind is drawn with weights kill 4, term 2, stop 2, scale 1,
	// broker 1; a stop, a scale or a broker restart still running is not
	// started again, and broker restarts are at least 15 s apart.
	FaultEvery time.Duration
	// CrashRates overrides the probabilities of CrashPoints.
	CrashRates map[string]float64
	// Workload is an Online Retail CSV (plain or .gz) whose sale invoices
	// are sent as orders, spread over the first half of Duration. Empty: no
	// real orders.
	Workload string
	// Rate is the rate of synthetic orders, per second, during Duration
	// (random lines from the catalog, customers from a small hot set so
	// wallets run dry, some guests and some invalid orders). Default 15;
	// negative disables them.
	Rate float64
	// SeedData is the Online Retail CSV the catalog and wallets are
	// seeded from. Required.
	SeedData string
	// OpeningCredit is each wallet's opening balance in GBP, low enough
	// for refusals. Default "400".
	OpeningCredit string
	// SessionTimeout is the group session timeout of every member; SIGSTOP
	// lasts this plus 2 s. Default 6s (the embedded broker's minimum).
	SessionTimeout time.Duration
	// DrainTimeout bounds the wait, after the faults stop, for every order
	// to be processed and every lag to be 0. Default 3 minutes.
	DrainTimeout time.Duration
	// CheckEvery is the interval of the "committed offsets never ahead of
	// applied effects" check during the fault phase (it runs again at the
	// end). Default 15s; 0 keeps the default, negative checks only at the end.
	CheckEvery time.Duration
	// BadRecords is the number of records the harness makes bad: it
	// produces them, undecodable, to orderCreated and paymentProcessed
	// (alternately) during the fault phase, and checks that every DLQ
	// holds exactly the bad records of its group's input topics. Default
	// 8; negative: none.
	BadRecords int
	// Cluster runs on a real Kafka cluster and PostgreSQL instead of the
	// embedded broker and SQLite. Nil: embedded.
	Cluster *Cluster
	// Out receives progress lines and the summary. Default io.Discard.
	Out io.Writer
}

func (c *Config) defaults() error {
	if c.Binary == "" || c.DataDir == "" || c.SeedData == "" {
		return errors.New("chaos: Binary, DataDir and SeedData are required")
	}
	if c.Duration <= 0 {
		c.Duration = 2 * time.Minute
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Instances <= 0 {
		c.Instances = 2
	}
	if c.Instances > 4 {
		return fmt.Errorf("chaos: Instances %d: at most 4 (the topics have 6 partitions, scaling goes to 4)", c.Instances)
	}
	if c.Checkouts <= 0 {
		c.Checkouts = 2
	}
	kinds := EmbeddedFaults
	if c.Cluster != nil {
		kinds = ClusterFaults
		if c.Cluster.KafkaScript == "" || c.Cluster.PostgresScript == "" || c.Cluster.DSN == "" {
			return errors.New("chaos: Cluster needs KafkaScript, PostgresScript and DSN")
		}
		if c.Cluster.MinInsyncReplicas <= 0 {
			c.Cluster.MinInsyncReplicas = 2
		}
	}
	if len(c.Faults) == 0 {
		for _, f := range kinds {
			if c.Cluster != nil && !c.Cluster.Proxied && contains(netFaults, f) {
				continue
			}
			c.Faults = append(c.Faults, f)
		}
		c.Faults = append(c.Faults, sortedKeys(CrashPoints)...)
	}
	for _, f := range c.Faults {
		if !contains(kinds, f) && CrashPoints[f] == 0 {
			where := "on the embedded broker"
			if c.Cluster != nil {
				where = "on a real cluster"
			}
			return fmt.Errorf("chaos: fault %q is not one %s: want %s or %s", f, where, strings.Join(kinds, ", "), strings.Join(sortedKeys(CrashPoints), ", "))
		}
		if contains(netFaults, f) && (c.Cluster == nil || !c.Cluster.Proxied) {
			return fmt.Errorf("chaos: fault %q needs the fault proxies (Cluster.Proxied, --proxy)", f)
		}
	}
	if c.BadRecords == 0 {
		c.BadRecords = 8
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = 4 * time.Second
	}
	if c.Rate == 0 {
		c.Rate = 15
	}
	if c.OpeningCredit == "" {
		c.OpeningCredit = "400"
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 6 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 3 * time.Minute
	}
	if c.CheckEvery == 0 {
		c.CheckEvery = 15 * time.Second
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

func (c *Config) enabled(f string) bool { return contains(c.Faults, f) }

// faultEnv is the ORDERCAST_FAULT value for processes started now: the
// enabled crash points, disarmed at until (zero: by SIGUSR1 only).
func (c *Config) faultEnv(until time.Time) string {
	var parts []string
	for _, p := range sortedKeys(CrashPoints) {
		if !c.enabled(p) {
			continue
		}
		rate := CrashPoints[p]
		if r, ok := c.CrashRates[p]; ok {
			rate = r
		}
		if rate > 0 {
			parts = append(parts, fmt.Sprintf("%s:%g", p, rate))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	if !until.IsZero() {
		parts = append(parts, fmt.Sprintf("until:%d", until.Unix()))
	}
	return strings.Join(parts, ",")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

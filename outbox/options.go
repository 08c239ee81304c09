package outbox

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Opt configures a Relay.
type Opt func(*Relay)

// MaxBatch sets how many rows one step reads and produces together
// (default DefaultMaxBatch). Values below 1 are ignored.
func MaxBatch(n int) Opt {
	return func(r *Relay) {
		if n >= 1 {
			r.batchSize = n
		}
	}
}

// PollInterval sets how long an idle relay waits before it looks for
// new rows when nobody calls Notify (default DefaultPollInterval). Values
// below 1 ms are ignored.
func PollInterval(d time.Duration) Opt {
	return func(r *Relay) {
		if d >= time.Millisecond {
			r.pollInterval = d
		}
	}
}

// Backoff sets the bounds of the exponential pause after a failed step
// (defaults DefaultMinBackoff and DefaultMaxBackoff). It is ignored unless
// 0 < min <= max.
func Backoff(min, max time.Duration) Opt {
	return func(r *Relay) {
		if min > 0 && min <= max {
			r.minBackoff, r.maxBackoff = min, max
		}
	}
}

// Table sets the name of the outbox table the relay publishes (default
// DefaultTable, "outbox"): the table given to [New] for Enqueue. A name that
// is not a plain lower-case identifier (sqldb.CheckTableName) makes NewRelay
// and NewTransactionalRelay return an error.
func Table(name string) Opt {
	return func(r *Relay) { r.table = name }
}

// Logger sets the relay's logger (default: one that discards everything,
// as the processor's). The relay logs at WARN a failed step or session
// before its backoff, at ERROR a refused ACL and a progress marker that does
// not match the database, and at INFO the exactly-once mode's fencing,
// takeover and recovery. A nil l is ignored. OnError and WithMetrics report
// failures whatever the logger.
func Logger(l *slog.Logger) Opt {
	return func(r *Relay) {
		if l != nil {
			r.logger = l
		}
	}
}

// OnError sets a function called, on Run's goroutine, with the error of
// each failed step (a produce or database failure) before the relay backs
// off; for metrics and alerts. It must not block for long.
func OnError(fn func(error)) Opt {
	return func(r *Relay) { r.onError = fn }
}

// txnConfig is the exactly-once mode's configuration.
type txnConfig struct {
	name string
	// txnID and markerTopic are the names in use: DefaultTransactionalID(name)
	// and DefaultMarkerTopic(name) unless set by TransactionalID or
	// MarkerTopic (checked by NewTransactionalRelay).
	txnID, markerTopic string
	txnIDSet, topicSet bool
	clientOpts         []kgo.Opt
	perClient          func(role string) []kgo.Opt // ClientOpts; nil: none
	rf                 int16
	minISR             int
	txnTimeout         time.Duration
	takeoverAfter      time.Duration
	idSuffix           string
}

// MarkerTopicReplication sets the replication factor and min.insync.replicas of
// the progress marker topic when the exactly-once relay creates it (default
// -1 and 0: the broker's defaults). Use 3 and 2 on a real cluster. Ignored by
// a relay made with NewRelay.
func MarkerTopicReplication(replicationFactor int16, minInsyncReplicas int) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.rf, r.txn.minISR = replicationFactor, minInsyncReplicas
		}
	}
}

// TakeoverAfter sets how long a standby relay (one that was fenced by
// another relay with the same transactional id) waits while rows are pending
// and the oldest unsent row does not change before it takes over (default
// DefaultTakeoverAfter). Values <= 0 are ignored, as is the option on a relay
// made with NewRelay.
func TakeoverAfter(d time.Duration) Opt {
	return func(r *Relay) {
		if r.txn != nil && d > 0 {
			r.txn.takeoverAfter = d
		}
	}
}

// TransactionTimeout sets the relay's transaction.timeout.ms (default
// DefaultTransactionTimeout). Values below 1 s are ignored, as is the option
// on a relay made with NewRelay.
func TransactionTimeout(d time.Duration) Opt {
	return func(r *Relay) {
		if r.txn != nil && d >= time.Second {
			r.txn.txnTimeout = d
		}
	}
}

// TransactionalID sets the exactly-once relay's transactional id
// (Kafka's transactional.id; default DefaultTransactionalID(name),
// "ordercast-outbox-<name>"). Every relay of one outbox must use the same id
// (that is what fences a zombie), and it must stay the same across restarts;
// the relay's principal needs WRITE on it. An empty id makes
// NewTransactionalRelay return an error. Ignored by a relay made with
// NewRelay.
func TransactionalID(id string) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.txnID, r.txn.txnIDSet = id, true
		}
	}
}

// MarkerTopic sets the name of the exactly-once relay's progress
// marker topic (default DefaultMarkerTopic(name), "ordercast.outbox.<name>"). Every
// relay of one outbox must use the same topic, and no other program may
// write to it; the relay's principal needs READ, WRITE and (unless the topic
// exists, with one partition and cleanup.policy=compact) CREATE on it. A
// name that is not a valid Kafka topic name (1 to 249 of a-z A-Z 0-9 '.' '_'
// '-', not "." or "..") makes NewTransactionalRelay return an error. Ignored
// by a relay made with NewRelay. (MarkerTopicReplication sets its replication, not
// its name.)
func MarkerTopic(topic string) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.markerTopic, r.txn.topicSet = topic, true
		}
	}
}

// ClientOpts sets a function called each time the exactly-once relay
// creates a Kafka client, with the client's role (ClientProducer,
// ClientConfirm, ClientMarkers); the options it returns are appended to
// NewTransactionalRelay's clientOpts for that client only. Use it for what
// must be one per client: a kgo.ClientID per role, metrics hooks that keep
// per-client state (kprom). The function must not return transactional
// id, acks, consume or isolation options; it is called from the relay's
// goroutine (Run) only. Ignored by a relay made with NewRelay.
func ClientOpts(fn func(role string) []kgo.Opt) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.perClient = fn
		}
	}
}

// clientOptsFor returns the options of a new client of the given role:
// clientOpts, then those of ClientOpts.
func (tc *txnConfig) clientOptsFor(role string) []kgo.Opt {
	opts := append([]kgo.Opt{}, tc.clientOpts...)
	if tc.perClient != nil {
		opts = append(opts, tc.perClient(role)...)
	}
	return opts
}

// TransactionalIDSuffix appends suffix to the relay's transactional id
// (DefaultTransactionalID(name), or the TransactionalID id, + suffix); the
// marker topic keeps its name. Only for
// an embedded kfake broker that dies with this process: there a fresh id per
// start avoids a defect of kfake's recovery of transactions left open by a
// crashed producer. On a real cluster the id must stay
// the same across restarts, or a zombie relay is no longer fenced. Ignored by
// a relay made with NewRelay.
func TransactionalIDSuffix(suffix string) Opt {
	return func(r *Relay) {
		if r.txn != nil {
			r.txn.idSuffix = suffix
		}
	}
}

// resolveNames fills in the default names and checks the chosen ones.
func (tc *txnConfig) resolveNames() error {
	if !tc.txnIDSet {
		tc.txnID = DefaultTransactionalID(tc.name)
	} else if tc.txnID == "" {
		return errors.New("outbox: TransactionalID: empty transactional id")
	}
	if !tc.topicSet {
		tc.markerTopic = DefaultMarkerTopic(tc.name)
	}
	if err := checkTopicName(tc.markerTopic); err != nil {
		return fmt.Errorf("outbox: marker topic: %w", err)
	}
	return nil
}

// checkTopicName applies Kafka's topic name rule (org.apache.kafka.common.
// internals.Topic.validate): 1 to 249 characters of a-z A-Z 0-9 '.' '_'
// '-', and not "." or "..".
func checkTopicName(t string) error {
	switch {
	case t == "":
		return errors.New("empty topic name")
	case t == "." || t == "..":
		return fmt.Errorf("topic name %q is not allowed", t)
	case len(t) > 249:
		return fmt.Errorf("topic name of %d characters, want at most 249", len(t))
	case strings.ContainsFunc(t, func(c rune) bool {
		return !(c == '.' || c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	}):
		return fmt.Errorf("topic name %q: want letters, digits, '.', '_' or '-'", t)
	}
	return nil
}

// Roles of the Kafka clients an exactly-once relay creates, as passed to
// the ClientOpts function.
const (
	// ClientProducer is each session's transactional producer (one per
	// session: a failed step starts a new one).
	ClientProducer = "producer"
	// ClientConfirm is each session's read_committed reader of its own
	// progress markers (the read-back after each commit).
	ClientConfirm = "confirm"
	// ClientMarkers is the short-lived read_committed reader of the marker
	// topic that a session's recovery opens.
	ClientMarkers = "markers"
)

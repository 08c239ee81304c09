package processor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrClientOpt is wrapped by the error New and NewTransactional return when
// ClientOpts carries a franz-go option that the runtime sets itself: it would
// be overridden (or would break what the runtime relies on), so it is refused
// instead of being silently ignored. The error names the processor option
// that carried it (ClientOpts, ConsumerOpts or ProducerOpts), the franz-go
// option and what to use instead.
var ErrClientOpt = errors.New("processor: option set by the runtime")

// clientOptError is the error wrapping ErrClientOpt: its message names the
// option and the refused settings without repeating the sentinel's.
type clientOptError struct{ msg string }

func (e *clientOptError) Error() string        { return e.msg }
func (e *clientOptError) Is(target error) bool { return target == ErrClientOpt }

// runtimeOpt is a franz-go option that the runtime sets itself.
type runtimeOpt struct {
	fn      any    // the kgo option function, as given to kgo.(*Client).OptValue
	name    string // its name, for the error
	instead string // what to use instead
	// txnInstead, if set, replaces instead for NewTransactional, which
	// has no DLQ producer.
	txnInstead string
	// sentinel sets the option to two values that differ from each other
	// (probes A and B, see refusedClientOpts) for options whose default is
	// a value a user may pass; nil for options whose default (false, nil,
	// empty) is not something to pass.
	sentinel func(probe int) kgo.Opt
	// allowed, if set, is a value of the option that is not refused (the
	// one the runtime sets anyway).
	allowed any
	// callback marks the group callbacks: franz-go refuses them without a
	// group, and fills in its own (non-nil) ones with a group, so they can
	// only be told apart from a probe without a group (see groupOnly).
	callback bool
}

// runtimeOpts lists the franz-go options that New and NewTransactional set
// themselves (on the consumer, the transactional session or the DLQ
// producer) or that would change what the runtime relies on.
var runtimeOpts = []runtimeOpt{
	{fn: kgo.SeedBrokers, name: "kgo.SeedBrokers", instead: "processor.Brokers",
		sentinel: func(i int) kgo.Opt { return kgo.SeedBrokers(fmt.Sprintf("probe-%d.invalid:1", i)) }},
	{fn: kgo.ClientID, name: "kgo.ClientID", instead: "processor.ClientID",
		sentinel: func(i int) kgo.Opt { return kgo.ClientID(fmt.Sprintf("ordercast-probe-%d", i)) }},
	{fn: kgo.ConsumerGroup, name: "kgo.ConsumerGroup", instead: "processor.Group"},
	{fn: kgo.ShareGroup, name: "kgo.ShareGroup", instead: "processor.Group (the runtime consumes as a consumer group)"},
	{fn: kgo.ConsumeTopics, name: "kgo.ConsumeTopics", instead: "processor.Topics"},
	{fn: kgo.ConsumeRegex, name: "kgo.ConsumeRegex", instead: "processor.Topics (topic names, not patterns)"},
	{fn: kgo.ConsumePartitions, name: "kgo.ConsumePartitions", instead: "processor.Topics (the group assigns partitions)"},
	{fn: kgo.ConsumeResetOffset, name: "kgo.ConsumeResetOffset", instead: "processor.StartOffset",
		sentinel: func(i int) kgo.Opt { return kgo.ConsumeResetOffset(kgo.NewOffset().At(1<<40 + int64(i))) }},
	{fn: kgo.ConsumeStartOffset, name: "kgo.ConsumeStartOffset", instead: "processor.StartOffset",
		sentinel: func(i int) kgo.Opt { return kgo.ConsumeStartOffset(kgo.NewOffset().At(1<<40 + int64(i))) }},
	{fn: kgo.AdjustFetchOffsetsFn, name: "kgo.AdjustFetchOffsetsFn", instead: "processor.StartOffset"},
	{fn: kgo.FetchIsolationLevel, name: "kgo.FetchIsolationLevel", instead: "nothing: the runtime always reads read_committed",
		sentinel: func(i int) kgo.Opt {
			if i == 0 {
				return kgo.FetchIsolationLevel(kgo.ReadUncommitted())
			}
			return kgo.FetchIsolationLevel(kgo.ReadCommitted())
		}},
	{fn: kgo.KeepControlRecords, name: "kgo.KeepControlRecords", instead: "nothing: the runtime always keeps them (its commit point passes transaction markers)"},
	{fn: kgo.DisableAutoCommit, name: "kgo.DisableAutoCommit", instead: "nothing: the runtime commits itself (processor.CommitInterval)"},
	{fn: kgo.AutoCommitMarks, name: "kgo.AutoCommitMarks", instead: "processor.CommitInterval (the runtime commits itself)"},
	{fn: kgo.GreedyAutoCommit, name: "kgo.GreedyAutoCommit", instead: "processor.CommitInterval (the runtime commits itself)"},
	{fn: kgo.AutoCommitInterval, name: "kgo.AutoCommitInterval", instead: "processor.CommitInterval",
		sentinel: func(i int) kgo.Opt { return kgo.AutoCommitInterval(time.Hour + time.Duration(i+1)*time.Millisecond) }},
	{fn: kgo.AutoCommitCallback, name: "kgo.AutoCommitCallback", instead: "processor.CommitInterval (the runtime commits itself; see WithMetrics for commit metrics)", callback: true},
	{fn: kgo.BlockRebalanceOnPoll, name: "kgo.BlockRebalanceOnPoll", instead: "nothing: the runtime always sets it"},
	{fn: kgo.OnPartitionsAssigned, name: "kgo.OnPartitionsAssigned", instead: "nothing: the runtime handles rebalances (Health and WithMetrics report them)", callback: true},
	{fn: kgo.OnPartitionsRevoked, name: "kgo.OnPartitionsRevoked", instead: "nothing: the runtime handles rebalances (Health and WithMetrics report them)", callback: true},
	{fn: kgo.OnPartitionsLost, name: "kgo.OnPartitionsLost", instead: "nothing: the runtime handles rebalances (Health and WithMetrics report them)", callback: true},
	{fn: kgo.SessionTimeout, name: "kgo.SessionTimeout", instead: "processor.SessionTimeout",
		sentinel: func(i int) kgo.Opt { return kgo.SessionTimeout(time.Hour + time.Duration(i+1)*time.Millisecond) }},
	{fn: kgo.RebalanceTimeout, name: "kgo.RebalanceTimeout", instead: "processor.RebalanceTimeout",
		sentinel: func(i int) kgo.Opt { return kgo.RebalanceTimeout(time.Hour + time.Duration(i+1)*time.Millisecond) }},
	{fn: kgo.InstanceID, name: "kgo.InstanceID", instead: "processor.InstanceID"},
	{fn: kgo.Balancers, name: "kgo.Balancers", instead: "processor.Assignors (or processor.GroupProtocol)",
		sentinel: func(i int) kgo.Opt {
			if i == 0 {
				return kgo.Balancers(kgo.RoundRobinBalancer())
			}
			return kgo.Balancers(kgo.RangeBalancer())
		}},
	{fn: kgo.ServerSideBalancer, name: "kgo.ServerSideBalancer", instead: `processor.GroupProtocol("consumer")`},
	{fn: kgo.TransactionalID, name: "kgo.TransactionalID", instead: "processor.NewTransactional"},
	{fn: kgo.TransactionTimeout, name: "kgo.TransactionTimeout", instead: "processor.TransactionTimeout",
		sentinel: func(i int) kgo.Opt { return kgo.TransactionTimeout(time.Hour + time.Duration(i+1)*time.Millisecond) }},
	{fn: kgo.RequiredAcks, name: "kgo.RequiredAcks", instead: "processor.Producer (the runtime writes with acks=all)", allowed: kgo.AllISRAcks(),
		txnInstead: "nothing: transactions write with acks=all (KIP-98)"},
	{fn: kgo.DisableIdempotentWrite, name: "kgo.DisableIdempotentWrite", instead: "processor.Producer (the runtime's DLQ producer is idempotent)",
		txnInstead: "nothing: transactions need the idempotent producer (KIP-98)"},
	{fn: kgo.ProducerLinger, name: "kgo.ProducerLinger", instead: "processor.Producer (the runtime's DLQ producer does not linger)",
		txnInstead: "nothing: the exactly-once mode flushes each transaction's records when it commits",
		sentinel:   func(i int) kgo.Opt { return kgo.ProducerLinger(50*time.Second + time.Duration(i+1)*time.Millisecond) }},
}

// refusedClientOpts returns an error wrapping ErrClientOpt that names every
// option of opts the runtime sets itself (runtimeOpts), and nil if there is
// none. It returns kgo's error if opts are invalid in themselves. where
// names the processor option that gave opts (ClientOpts, ConsumerOpts,
// ProducerOpts) and starts the error; txn selects NewTransactional's hints.
//
// franz-go refuses acks other than all on an idempotent producer; such
// opts are probed again with kgo.DisableIdempotentWrite added, so that
// kgo.RequiredAcks is named rather than franz-go's error returned.
//
// franz-go options are opaque; a client tells what they set through
// OptValue. So opts are applied to two probe clients, A and B, each after
// its own value for every option whose default is a value a user may pass
// (the sentinels): an option that reads the same in both was set by opts.
// Options whose default is nothing a user passes (false, nil, empty) are set
// if they read otherwise in A. The probes are closed before this returns and
// never reach the network: their dialer refuses, their context is canceled
// and KIP-714 metrics are off. Hooks in opts (kgo.WithHooks) do see them
// (OnNewClient, OnClientClosed).
func refusedClientOpts(where string, opts []kgo.Opt, txn bool) error {
	if len(opts) == 0 {
		return nil
	}
	var nils []string
	for i, o := range opts {
		if o == nil {
			nils = append(nils, fmt.Sprintf("%s: option %d of %d is nil", where, i+1, len(opts)))
		}
	}
	if len(nils) > 0 {
		return errors.New(strings.Join(nils, "; "))
	}
	var probes [2]*kgo.Client
	var probeErr error // franz-go's error, when the probes needed DisableIdempotentWrite
	relaxed := append(opts[:len(opts):len(opts)], kgo.DisableIdempotentWrite())
	for i := range probes {
		var cl *kgo.Client
		var err error
		if probeErr != nil {
			cl, err = probeClient(i, relaxed)
		} else if cl, err = probeClient(i, opts); err != nil && i == 0 {
			if refused := groupOnly(opts, txn); len(refused) > 0 {
				return &clientOptError{where + ": option set by the runtime: " + strings.Join(refused, "; ")}
			}
			if rcl, rerr := probeClient(0, relaxed); rerr == nil {
				probeErr, cl, err = err, rcl, nil
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		probes[i] = cl
	}
	// With a group set (refused itself), franz-go wraps the group
	// callbacks: they cannot be told apart then.
	grouped := probes[0].OptValue(kgo.ConsumerGroup) != "" || probes[0].OptValue(kgo.ShareGroup) != ""
	var refused []string
	ackRefused := false
	for _, r := range runtimeOpts {
		if r.callback && grouped || probeErr != nil && r.name == "kgo.DisableIdempotentWrite" {
			continue
		}
		a, b := probes[0].OptValue(r.fn), probes[1].OptValue(r.fn)
		var set bool
		switch {
		case r.sentinel != nil:
			set = reflect.DeepEqual(a, b)
		case r.allowed != nil:
			set = !reflect.DeepEqual(a, r.allowed)
		default:
			set = a != nil && !reflect.ValueOf(a).IsZero()
		}
		if set {
			refused = append(refused, fmt.Sprintf("%s (use %s)", r.name, r.hint(txn)))
			ackRefused = ackRefused || r.name == "kgo.RequiredAcks"
		}
	}
	if probeErr != nil && !ackRefused {
		return fmt.Errorf("%s: %w", where, probeErr) // invalid for another reason
	}
	if len(refused) == 0 {
		return nil
	}
	return &clientOptError{where + ": option set by the runtime: " + strings.Join(refused, "; ")}
}

// hint is what to use instead of r, in New's mode or NewTransactional's.
func (r runtimeOpt) hint(txn bool) string {
	if txn && r.txnInstead != "" {
		return r.txnInstead
	}
	return r.instead
}

// groupOnly finds, in opts that franz-go refuses together, the options that
// franz-go refuses without a consumer group (auto-commit settings and group
// callbacks): the runtime sets those itself. Each option is probed alone,
// without and then with a group.
func groupOnly(opts []kgo.Opt, txn bool) []string {
	var refused []string
	for _, o := range opts {
		if _, err := probeClient(0, []kgo.Opt{o}); err == nil {
			continue
		}
		cl, err := probeClient(0, []kgo.Opt{o, kgo.ConsumerGroup("ordercast-probe")})
		if err != nil {
			continue
		}
		named := false
		for _, r := range runtimeOpts {
			switch r.fn.(type) {
			case func() kgo.GroupOpt: // DisableAutoCommit, AutoCommitMarks, GreedyAutoCommit...
				if v, _ := cl.OptValue(r.fn).(bool); v {
					refused = append(refused, fmt.Sprintf("%s (use %s)", r.name, r.hint(txn)))
					named = true
				}
			}
		}
		if !named {
			refused = append(refused, "kgo.OnPartitionsAssigned, kgo.OnPartitionsRevoked, kgo.OnPartitionsLost or kgo.AutoCommitCallback (use nothing: the runtime handles rebalances and commits; Health and WithMetrics report them)")
		}
	}
	return refused
}

// probeClient builds probe i of refusedClientOpts.
func probeClient(i int, opts []kgo.Opt) (*kgo.Client, error) {
	var all []kgo.Opt
	for _, r := range runtimeOpts {
		if r.sentinel != nil {
			all = append(all, r.sentinel(i))
		}
	}
	all = append(all, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	all = append(all,
		kgo.DialTLSConfig(nil), // Dialer and DialTLSConfig exclude each other
		kgo.Dialer(func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("processor: option probe client does not dial")
		}),
		kgo.WithContext(ctx),
		kgo.DisableClientMetrics(),
		kgo.WithLogger(nopLogger{}),
	)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, err
	}
	cl.Close()
	return cl, nil
}

type nopLogger struct{}

func (nopLogger) Level() kgo.LogLevel              { return kgo.LogLevelNone }
func (nopLogger) Log(kgo.LogLevel, string, ...any) {}

package processor

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// TestClientOptsRefused: New and NewTransactional refuse every franz-go
// option the runtime sets itself, naming it and what to use instead; that
// includes an option set to its franz-go default or to the runtime's own
// value (it would still be overridden, or is meaningless).
func TestClientOptsRefused(t *testing.T) {
	onParts := func(context.Context, *kgo.Client, map[string][]int32) {}
	for _, tc := range []struct {
		opt     kgo.Opt
		name    string
		instead string
	}{
		{kgo.SeedBrokers("127.0.0.1:9092"), "kgo.SeedBrokers", "processor.Brokers"},
		{kgo.SeedBrokers("127.0.0.1"), "kgo.SeedBrokers", "processor.Brokers"}, // franz-go's default
		{kgo.ClientID("kgo"), "kgo.ClientID", "processor.ClientID"},
		{kgo.ClientID("me"), "kgo.ClientID", "processor.ClientID"},
		{kgo.ConsumerGroup("g"), "kgo.ConsumerGroup", "processor.Group"},
		{kgo.ShareGroup("g"), "kgo.ShareGroup", "processor.Group"},
		{kgo.ConsumeTopics("x"), "kgo.ConsumeTopics", "processor.Topics"},
		{kgo.ConsumeRegex(), "kgo.ConsumeRegex", "processor.Topics"},
		{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"x": {0: kgo.NewOffset()}}), "kgo.ConsumePartitions", "processor.Topics"},
		{kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), "kgo.ConsumeResetOffset", "processor.StartOffset"},
		{kgo.ConsumeResetOffset(kgo.RewindOffset(time.Minute)), "kgo.ConsumeResetOffset", "processor.StartOffset"}, // franz-go's default
		{kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()), "kgo.ConsumeStartOffset", "processor.StartOffset"},
		{kgo.AdjustFetchOffsetsFn(func(_ context.Context, o map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return o, nil
		}), "kgo.AdjustFetchOffsetsFn", "processor.StartOffset"},
		{kgo.FetchIsolationLevel(kgo.ReadUncommitted()), "kgo.FetchIsolationLevel", "read_committed"},
		{kgo.FetchIsolationLevel(kgo.ReadCommitted()), "kgo.FetchIsolationLevel", "read_committed"},
		{kgo.KeepControlRecords(), "kgo.KeepControlRecords", "keeps them"},
		{kgo.DisableAutoCommit(), "kgo.DisableAutoCommit", "processor.CommitInterval"},
		{kgo.AutoCommitMarks(), "kgo.AutoCommitMarks", "processor.CommitInterval"},
		{kgo.GreedyAutoCommit(), "kgo.GreedyAutoCommit", "processor.CommitInterval"},
		{kgo.AutoCommitInterval(5 * time.Second), "kgo.AutoCommitInterval", "processor.CommitInterval"},
		{kgo.AutoCommitCallback(func(*kgo.Client, *kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error) {}), "kgo.AutoCommitCallback", "commits"},
		{kgo.BlockRebalanceOnPoll(), "kgo.BlockRebalanceOnPoll", "always sets it"},
		{kgo.OnPartitionsAssigned(onParts), "kgo.OnPartitionsAssigned", "handles rebalances"},
		{kgo.OnPartitionsRevoked(onParts), "kgo.OnPartitionsRevoked", "handles rebalances"},
		{kgo.OnPartitionsLost(onParts), "kgo.OnPartitionsLost", "handles rebalances"},
		{kgo.SessionTimeout(45 * time.Second), "kgo.SessionTimeout", "processor.SessionTimeout"},
		{kgo.SessionTimeout(10 * time.Second), "kgo.SessionTimeout", "processor.SessionTimeout"},
		{kgo.RebalanceTimeout(time.Minute), "kgo.RebalanceTimeout", "processor.RebalanceTimeout"},
		{kgo.InstanceID("i-1"), "kgo.InstanceID", "processor.InstanceID"},
		{kgo.Balancers(kgo.CooperativeStickyBalancer()), "kgo.Balancers", "processor.GroupProtocol"},
		{kgo.Balancers(kgo.RangeBalancer()), "kgo.Balancers", "processor.GroupProtocol"},
		{kgo.ServerSideBalancer(), "kgo.ServerSideBalancer", "processor.GroupProtocol"},
		{kgo.TransactionalID("tx"), "kgo.TransactionalID", "processor.NewTransactional"},
		{kgo.TransactionTimeout(40 * time.Second), "kgo.TransactionTimeout", "processor.TransactionTimeout"},
		{kgo.RequiredAcks(kgo.LeaderAck()), "kgo.RequiredAcks", "processor.Producer"}, // franz-go refuses it without DisableIdempotentWrite
		{kgo.DisableIdempotentWrite(), "kgo.DisableIdempotentWrite", "processor.Producer"},
		{kgo.ProducerLinger(10 * time.Millisecond), "kgo.ProducerLinger", "processor.Producer"},
	} {
		// NewTransactional's hints, where they differ (it has no DLQ producer).
		txnInstead := map[string]string{
			"kgo.RequiredAcks":           "acks=all",
			"kgo.DisableIdempotentWrite": "idempotent producer",
			"kgo.ProducerLinger":         "flushes each transaction",
		}[tc.name]
		t.Run(tc.name, func(t *testing.T) {
			opts := []kgo.Opt{tc.opt}
			_, errNew := New(Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(func(context.Context, *kgo.Record) error { return nil }), ClientOpts(opts...))
			_, errTxn := NewTransactional("tx", func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil },
				Brokers("127.0.0.1:1"), Group("g"), Topics("in"), ClientOpts(opts...))
			for mode, err := range map[string]error{"New": errNew, "NewTransactional": errTxn} {
				if !errors.Is(err, ErrClientOpt) {
					t.Fatalf("%s: error %v, want ErrClientOpt", mode, err)
				}
				instead := tc.instead
				if mode == "NewTransactional" && txnInstead != "" {
					instead = txnInstead
					if strings.Contains(err.Error(), "processor.Producer") {
						t.Errorf("%s: error %q points to processor.Producer, which that mode does not use", mode, err)
					}
				}
				if !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), instead) {
					t.Errorf("%s: error %q does not name %s and %q", mode, err, tc.name, instead)
				}
				if !strings.Contains(err.Error(), "invalid config: ClientOpts: ") || strings.Count(err.Error(), "ClientOpts") != 1 {
					t.Errorf("%s: error %q does not start with the one option used, ClientOpts", mode, err)
				}
				if n := strings.Count(err.Error(), "(use "); n != 1 {
					t.Errorf("%s: error %q names %d options, want 1", mode, err, n)
				}
			}
		})
	}
}

// TestClientOptsAllowed: options the runtime does not set pass, alone and
// together (TLS, SASL, a dialer, timeouts, fetch sizes, hooks...), and so do
// the runtime's defaults that ClientOpts may override (HeartbeatInterval,
// FetchMaxWait). The clients built to inspect the options never dial.
func TestClientOptsAllowed(t *testing.T) {
	dialed := make(chan string, 10)
	dialer := func(_ context.Context, _, host string) (net.Conn, error) {
		dialed <- host
		return nil, errors.New("test dialer")
	}
	for name, opts := range map[string][]kgo.Opt{
		"Dialer":                 {kgo.Dialer(dialer)},
		"DialTLSConfig":          {kgo.DialTLSConfig(&tls.Config{ServerName: "kafka"})},
		"DialTLS":                {kgo.DialTLS()},
		"SASL":                   {kgo.SASL(plain.Auth{User: "u", Pass: "p"}.AsMechanism())},
		"RequestTimeoutOverhead": {kgo.RequestTimeoutOverhead(20 * time.Second)},
		"FetchMaxBytes":          {kgo.FetchMaxBytes(1 << 20), kgo.FetchMaxPartitionBytes(64 << 10)},
		"FetchMaxWait":           {kgo.FetchMaxWait(100 * time.Millisecond)},
		"HeartbeatInterval":      {kgo.HeartbeatInterval(time.Second)},
		"WithHooks":              {kgo.WithHooks(connectHook{})},
		"Rack":                   {kgo.Rack("a")},
		"MetadataMaxAge":         {kgo.MetadataMaxAge(time.Minute)},
		"together": {kgo.Dialer(dialer), kgo.SASL(plain.Auth{User: "u", Pass: "p"}.AsMechanism()),
			kgo.RequestTimeoutOverhead(20 * time.Second), kgo.FetchMaxBytes(1 << 20), kgo.HeartbeatInterval(5 * time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			if err := refusedClientOpts("ClientOpts", opts, false); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
	select {
	case host := <-dialed:
		t.Fatalf("an option probe dialed %s", host)
	default:
	}
}

type connectHook struct{}

func (connectHook) OnBrokerConnect(kgo.BrokerMetadata, time.Duration, net.Conn, error) {}

// TestClientOptsInvalid: options franz-go itself refuses come back as an
// error from New, not as a panic or a probe that hangs.
func TestClientOptsInvalid(t *testing.T) {
	for _, opts := range [][]kgo.Opt{
		{kgo.Rack(strings.Repeat("r", 513))},         // franz-go: rack length over 512
		{kgo.MaxProduceRequestsInflightPerBroker(5)}, // franz-go: needs idempotency disabled
	} {
		err := refusedClientOpts("ProducerOpts", opts, false)
		if err == nil || errors.Is(err, ErrClientOpt) || !strings.HasPrefix(err.Error(), "ProducerOpts: ") {
			t.Fatalf("error %v, want franz-go's validation error after ProducerOpts", err)
		}
	}
}

// TestProducerOptsRefused: ProducerOpts refuses acks other than all and a
// non-idempotent DLQ producer with an error wrapping ErrClientOpt that
// names ProducerOpts (not ClientOpts) and the franz-go option; an
// allowed producer option passes.
func TestProducerOptsRefused(t *testing.T) {
	nop := func(context.Context, *kgo.Record) error { return nil }
	for _, tc := range []struct {
		opt  kgo.Opt
		name string
	}{
		{kgo.RequiredAcks(kgo.LeaderAck()), "kgo.RequiredAcks"},
		{kgo.RequiredAcks(kgo.NoAck()), "kgo.RequiredAcks"},
		{kgo.DisableIdempotentWrite(), "kgo.DisableIdempotentWrite"},
	} {
		_, err := New(Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(nop), ProducerOpts(tc.opt))
		if !errors.Is(err, ErrClientOpt) {
			t.Fatalf("%s: error %v, want ErrClientOpt", tc.name, err)
		}
		if !strings.Contains(err.Error(), "ProducerOpts: option set by the runtime: "+tc.name+" (use processor.Producer") ||
			strings.Contains(err.Error(), "ClientOpts") {
			t.Errorf("%s: error %q, want it to name ProducerOpts and %s only", tc.name, err, tc.name)
		}
	}
	_, err := New(Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(nop),
		ProducerOpts(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()))
	if !errors.Is(err, ErrClientOpt) || !strings.Contains(err.Error(), "kgo.RequiredAcks") || !strings.Contains(err.Error(), "kgo.DisableIdempotentWrite") {
		t.Errorf("acks=1 with idempotence disabled: error %v, want both named", err)
	}
	p, err := New(Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(nop), ProducerOpts(kgo.RecordRetries(3)))
	if err != nil {
		t.Fatalf("ProducerOpts(kgo.RecordRetries): %v", err)
	}
	p.cl.Close()
	p.prod.Close()
}

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
		{kgo.RequiredAcks(kgo.LeaderAck()), "kgo.RequiredAcks", "processor.Producer"},
		{kgo.ProducerLinger(10 * time.Millisecond), "kgo.ProducerLinger", "processor.Producer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []kgo.Opt{tc.opt}
			if tc.name == "kgo.RequiredAcks" {
				opts = append(opts, kgo.DisableIdempotentWrite()) // acks=1 needs it
			}
			_, errNew := New(Brokers("127.0.0.1:1"), Group("g"), Topics("in"), WithHandler(func(context.Context, *kgo.Record) error { return nil }), ClientOpts(opts...))
			_, errTxn := NewTransactional("tx", func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil },
				Brokers("127.0.0.1:1"), Group("g"), Topics("in"), ClientOpts(opts...))
			for mode, err := range map[string]error{"New": errNew, "NewTransactional": errTxn} {
				if !errors.Is(err, ErrClientOpt) {
					t.Fatalf("%s: error %v, want ErrClientOpt", mode, err)
				}
				if !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.instead) {
					t.Errorf("%s: error %q does not name %s and %q", mode, err, tc.name, tc.instead)
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
			if err := refusedClientOpts(opts); err != nil {
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
	err := refusedClientOpts([]kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}) // idempotency needs acks=all
	if err == nil || errors.Is(err, ErrClientOpt) || !strings.Contains(err.Error(), "ClientOpts: ") {
		t.Fatalf("error %v, want franz-go's validation error", err)
	}
}

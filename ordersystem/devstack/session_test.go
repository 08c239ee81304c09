package devstack

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSessionTimeoutsLikeKafka: the embedded broker accepts a group session
// timeout up to Apache Kafka's default group.max.session.timeout.ms (30m),
// not only kfake's own 5m: a member with a 10m session joins and is
// assigned its partition.
func TestSessionTimeoutsLikeKafka(t *testing.T) {
	s, err := Start(Config{DataDir: t.TempDir(), BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	adm, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	assigned := make(chan struct{})
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.SessionTimeout(10*time.Minute),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { close(assigned) }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var pollErr atomic.Value // the last poll error's text, for the failure message
	go func() {
		for ctx.Err() == nil {
			if f := cl.PollFetches(ctx); f.IsClientClosed() {
				return
			} else {
				f.EachError(func(_ string, _ int32, err error) { pollErr.Store(err.Error()) })
			}
		}
	}()
	select {
	case <-assigned:
	case <-ctx.Done():
		t.Fatalf("a member with a 10m session timeout was never assigned a partition (last poll error: %v)", pollErr.Load())
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/ordercast/ordercast/processor"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// consumeRaw is a plain franz-go poll loop with franz-go's defaults, plus
// what committing after handling needs: auto-commit of marked records only
// (kgo.AutoCommitMarks, every 5 s by default), each record marked after its
// handler returned, and rebalances held off while a poll's records are being
// handled (kgo.BlockRebalanceOnPoll). With a slow handler each partition of
// a poll is handled by a goroutine of its own (partition order, the
// partitions in parallel); with the no-op handler the loop handles inline.
func consumeRaw(ctx context.Context, m *meter) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(m.spec.Brokers...), kgo.ConsumerGroup(m.spec.Group),
		kgo.ConsumeTopics(m.spec.Topic), kgo.AutoCommitMarks(), kgo.BlockRebalanceOnPoll(), kgo.WithHooks(&m.reqs, &m.batches))
	if err != nil {
		return err
	}
	defer cl.Close()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-m.done; cancel() }()
	for pctx.Err() == nil {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			cl.AllowRebalance() // a poll that returned blocks rebalances (and Close's leave) until allowed
			break
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		if m.spec.Handler <= 0 {
			fs.EachRecord(func(r *kgo.Record) {
				m.begin()
				handle(ctx, 0)
				m.handled()
				cl.MarkCommitRecords(r)
			})
		} else {
			var wg sync.WaitGroup
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, r := range p.Records {
						if m.stopped() {
							return // the rest of the fetch is not handled, not marked: redelivered
						}
						m.begin()
						handle(ctx, m.spec.Handler)
						m.handled()
						cl.MarkCommitRecords(r)
					}
				}()
			})
			wg.Wait()
		}
		cl.AllowRebalance()
	}
	return cl.CommitMarkedOffsets(context.Background())
}

// consumeProcessor runs the processor in one ordering mode, with its
// defaults (Concurrency 16, MaxInFlight 1,000 records / 64 MiB, commit every
// second) except that key and unordered modes get Concurrency 1,000, so that
// every record in flight may be handled at once.
func consumeProcessor(ordering string) func(ctx context.Context, m *meter) error {
	return func(ctx context.Context, m *meter) error {
		o, err := processor.ParseOrdering(ordering)
		if err != nil {
			return err
		}
		opts := []processor.Opt{
			processor.Brokers(m.spec.Brokers...), processor.Group(m.spec.Group), processor.Topics(m.spec.Topic),
			processor.WithOrdering(o),
			processor.DeadLetter(false), // the handler never fails; the bench topic has no DLQ beside it
			processor.ConsumerOpts(kgo.WithHooks(&m.reqs, &m.batches)),
			processor.WithHandler(func(hctx context.Context, r *kgo.Record) error {
				m.begin()
				handle(hctx, m.spec.Handler)
				m.handled()
				return nil
			}),
		}
		conc := 1000
		if m.spec.InFlight > 0 {
			opts = append(opts, processor.MaxInFlight(m.spec.InFlight, 64<<20))
			conc = m.spec.InFlight
		}
		if o != processor.OrderPartition {
			opts = append(opts, processor.Concurrency(conc))
		}
		p, err := processor.New(opts...)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { <-m.done; cancel() }()
		if err := p.Run(rctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// consumeWatermill is watermill-kafka's Subscriber (Sarama's consumer
// group). Watermill hands a partition's next message only after the previous
// one was acked, and marks (then auto-commits, every second) an acked
// message's offset; each message is handled by a goroutine of its own so
// that the partitions are handled in parallel, its natural concurrency.
// Sarama needs its protocol version set: the default V1_0_0_0 asks for API
// versions Kafka 4 no longer serves (KIP-896).
func consumeWatermill(ctx context.Context, m *meter) error {
	sc := wkafka.DefaultSaramaSubscriberConfig()
	sc.Version = sarama.V3_6_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wkafka.NewSubscriber(wkafka.SubscriberConfig{
		Brokers: m.spec.Brokers, Unmarshaler: wkafka.DefaultMarshaler{},
		OverwriteSaramaConfig: sc, ConsumerGroup: m.spec.Group,
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(sctx, m.spec.Topic)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
loop:
	for {
		select {
		case <-m.done:
			break loop
		case msg, ok := <-ch:
			if !ok {
				return errors.New("watermill: subscription closed")
			}
			m.begin()
			if m.spec.Handler <= 0 {
				m.handled()
				msg.Ack()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(ctx, m.spec.Handler)
				m.handled()
				msg.Ack()
			}()
		}
	}
	wg.Wait()
	cancel()
	return sub.Close()
}

// consumeKafkaGo is segmentio/kafka-go's Reader in a group: FetchMessage,
// handle, CommitMessages, one message at a time (the Reader is one stream:
// its natural concurrency is 1). CommitInterval 1s makes CommitMessages
// queue the offset for a periodic commit instead of committing synchronously
// per message; the rest is kafka-go's defaults.
func consumeKafkaGo(ctx context.Context, m *meter) error {
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: m.spec.Brokers, GroupID: m.spec.Group, Topic: m.spec.Topic,
		StartOffset: kafkago.FirstOffset, CommitInterval: time.Second,
		Logger: log.New(io.Discard, "", 0),
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-m.done; cancel() }()
	for {
		msg, err := r.FetchMessage(rctx)
		if err != nil {
			if rctx.Err() != nil {
				break
			}
			r.Close()
			return err
		}
		m.begin()
		handle(ctx, m.spec.Handler)
		m.handled()
		if err := r.CommitMessages(context.Background(), msg); err != nil {
			r.Close()
			return err
		}
	}
	return r.Close() // commits what is queued
}

// consumeConfluent is confluent-kafka-go's poll loop (librdkafka bundled
// with the Go module): auto-commit on, the offset stored only after the
// handler returned (enable.auto.offset.store=false, StoreMessage), the
// at-least-once pattern librdkafka documents; one message at a time, its
// natural concurrency. The rest is librdkafka's defaults.
func consumeConfluent(ctx context.Context, m *meter) error {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":        m.spec.Brokers[0],
		"group.id":                 m.spec.Group,
		"auto.offset.reset":        "earliest",
		"enable.auto.offset.store": false,
	})
	if err != nil {
		return err
	}
	if err := c.Subscribe(m.spec.Topic, nil); err != nil {
		c.Close()
		return err
	}
	for {
		select {
		case <-m.done:
			if _, err := c.Commit(); err != nil {
				var ke kafka.Error
				if !errors.As(err, &ke) || ke.Code() != kafka.ErrNoOffset {
					c.Close()
					return err
				}
			}
			return c.Close()
		default:
		}
		ev := c.Poll(100)
		switch e := ev.(type) {
		case *kafka.Message:
			m.begin()
			handle(ctx, m.spec.Handler)
			m.handled()
			if _, err := c.StoreMessage(e); err != nil {
				c.Close()
				return err
			}
		case kafka.Error:
			if e.IsFatal() {
				c.Close()
				return e
			}
		}
	}
}

// Command kafkacheck exercises a running Kafka cluster (e.g. one started by
// scripts/kafka.sh) with franz-go: create a topic, produce with acks=all, consume
// it back through a consumer group, produce while a broker is taken down.
//
//	go -C cmd run ./kafkacheck -brokers 127.0.0.1:19092 smoke
//	go -C cmd run ./kafkacheck -brokers B create -topic t -partitions 3 -rf 3 -min-isr 2
//	go -C cmd run ./kafkacheck -brokers B produce -topic t -n 1000 [-duration 30s] [-txn]
//	go -C cmd run ./kafkacheck -brokers B consume -topic t -group g -n 1000 [-848]
//	go -C cmd run ./kafkacheck -brokers B describe -topic t
//	go -C cmd run ./kafkacheck -brokers B delete -topic t
//
// Exit status is non-zero on any failure. Only loopback addresses are expected.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/txncheck"
)

type opts struct {
	brokers    []string
	topic      string
	group      string
	partitions int
	rf         int
	minISR     int
	n          int
	duration   time.Duration
	timeout    time.Duration
	txn        bool
	nextGen    bool
}

func main() {
	var o opts
	var brokers string
	fs := flag.NewFlagSet("kafkacheck", flag.ExitOnError)
	fs.StringVar(&brokers, "brokers", envOr("KAFKA_BROKERS", "127.0.0.1:19092"), "bootstrap servers (default $KAFKA_BROKERS)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: kafkacheck [-brokers B] smoke|create|produce|consume|describe|delete [flags]")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() < 1 {
		fs.Usage()
		os.Exit(2)
	}
	o.brokers = strings.Split(brokers, ",")
	for _, b := range o.brokers {
		if !strings.Contains(b, ":") {
			fmt.Fprintf(os.Stderr, "kafkacheck: -brokers %q: want host:port[,host:port...]\n", brokers)
			os.Exit(2)
		}
	}
	cmd := fs.Arg(0)
	sub := flag.NewFlagSet(cmd, flag.ExitOnError)
	sub.StringVar(&o.topic, "topic", "kafkacheck", "topic")
	sub.StringVar(&o.group, "group", "", "consumer group (default: kafkacheck-<unix nanos>)")
	sub.IntVar(&o.partitions, "partitions", 3, "partitions for create/smoke")
	sub.IntVar(&o.rf, "rf", 1, "replication factor for create/smoke")
	sub.IntVar(&o.minISR, "min-isr", 0, "min.insync.replicas topic config (0: broker default)")
	sub.IntVar(&o.n, "n", 1000, "records to produce / expect")
	sub.DurationVar(&o.duration, "duration", 0, "produce: keep producing (n per second, paced) for this long instead of n once")
	sub.DurationVar(&o.timeout, "timeout", 60*time.Second, "overall deadline")
	sub.BoolVar(&o.txn, "txn", false, "produce: use a transactional producer (one transaction per 100 records)")
	sub.BoolVar(&o.nextGen, "848", false, "consume: use the KIP-848 consumer group protocol (kgo.ServerSideBalancer)")
	_ = sub.Parse(fs.Args()[1:])
	if o.group == "" {
		o.group = "kafkacheck-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var err error
	switch cmd {
	case "smoke":
		err = smoke(ctx, o)
	case "create":
		err = create(ctx, o)
	case "produce":
		_, err = produce(ctx, o)
	case "consume":
		err = consume(ctx, o)
	case "describe":
		err = describe(ctx, o)
	case "delete":
		err = deleteTopic(ctx, o)
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkacheck:", cmd+":", err)
		os.Exit(1)
	}
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func admin(o opts) (*kadm.Client, *kgo.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...))
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl, nil
}

func create(ctx context.Context, o opts) error {
	adm, cl, err := admin(o)
	if err != nil {
		return err
	}
	defer cl.Close()
	cfg := map[string]*string{}
	if o.minISR > 0 {
		v := strconv.Itoa(o.minISR)
		cfg["min.insync.replicas"] = &v
	}
	t0 := time.Now()
	resp, err := adm.CreateTopic(ctx, int32(o.partitions), int16(o.rf), cfg, o.topic)
	if err != nil {
		return err
	}
	if resp.Err != nil {
		return resp.Err
	}
	// wait until every partition has a leader and a full ISR
	for {
		ok, err := topicHealthy(ctx, adm, o.topic, o.partitions, o.rf)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s not healthy: %w", o.topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Printf("created topic %s: %d partitions, rf %d, min.insync.replicas %s, healthy in %v\n",
		o.topic, o.partitions, o.rf, orDefault(o.minISR), time.Since(t0).Round(time.Millisecond))
	return nil
}

func orDefault(v int) string {
	if v == 0 {
		return "(broker default)"
	}
	return strconv.Itoa(v)
}

func topicHealthy(ctx context.Context, adm *kadm.Client, topic string, partitions, rf int) (bool, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return false, err
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil || len(td.Partitions) != partitions {
		return false, nil
	}
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 || len(p.ISR) < rf {
			return false, nil
		}
	}
	return true, nil
}

func describe(ctx context.Context, o opts) error {
	adm, cl, err := admin(o)
	if err != nil {
		return err
	}
	defer cl.Close()
	md, err := adm.Metadata(ctx, o.topic)
	if err != nil {
		return err
	}
	td, ok := md.Topics[o.topic]
	if !ok {
		return fmt.Errorf("topic %s not in metadata", o.topic)
	}
	if td.Err != nil {
		return td.Err
	}
	ids := make([]int, 0, len(md.Brokers))
	for _, b := range md.Brokers {
		ids = append(ids, int(b.NodeID))
	}
	sort.Ints(ids)
	fmt.Printf("brokers %v, controller %d\n", ids, md.Controller)
	ps := td.Partitions.Sorted()
	for _, p := range ps {
		fmt.Printf("%s-%d leader %d replicas %v isr %v\n", o.topic, p.Partition, p.Leader, p.Replicas, p.ISR)
	}
	return nil
}

func deleteTopic(ctx context.Context, o opts) error {
	adm, cl, err := admin(o)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := adm.DeleteTopic(ctx, o.topic)
	if err != nil {
		return err
	}
	return resp.Err
}

type produceStats struct {
	ok, failed int64
	maxLat     time.Duration
	firstErr   error
}

// produce writes o.n records with acks=all (and idempotence, franz-go's default).
// With -duration it keeps going for that long at roughly o.n records per second
// and reports how many records failed and the slowest acknowledgement, which is
// what matters while a broker is being stopped and restarted.
func produce(ctx context.Context, o opts) (produceStats, error) {
	kopts := []kgo.Opt{
		kgo.SeedBrokers(o.brokers...),
		kgo.DefaultProduceTopic(o.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(30 * time.Second),
		kgo.ProducerLinger(5 * time.Millisecond),
	}
	if o.txn {
		kopts = append(kopts, kgo.TransactionalID("kafkacheck-"+o.topic), kgo.TransactionTimeout(30*time.Second))
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return produceStats{}, err
	}
	defer cl.Close()

	var st produceStats
	var mu sync.Mutex
	var ok, failed atomic.Int64
	var acked *kgo.Record // one record the open transaction wrote (-txn)
	record := func(i int, payload string) {
		start := time.Now()
		r := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(payload)}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			lat := time.Since(start)
			mu.Lock()
			if lat > st.maxLat {
				st.maxLat = lat
			}
			if err != nil && st.firstErr == nil {
				st.firstErr = err
			}
			if err == nil {
				acked = r
			}
			mu.Unlock()
			if err != nil {
				failed.Add(1)
			} else {
				ok.Add(1)
			}
		})
	}
	t0 := time.Now()
	batch := func(from, to int) error {
		if o.txn {
			if err := cl.BeginTransaction(); err != nil {
				return err
			}
			mu.Lock()
			acked = nil
			mu.Unlock()
		}
		for i := from; i < to; i++ {
			record(i, fmt.Sprintf("kafkacheck record %d at %s", i, time.Now().Format(time.RFC3339Nano)))
		}
		if o.txn {
			if err := cl.Flush(ctx); err != nil {
				return err
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				return err
			}
			// franz-go can abort a write-only transaction and return nil
			// (internal/txncheck): read one of its records back.
			mu.Lock()
			r := acked
			mu.Unlock()
			if r == nil {
				return nil // nothing acknowledged, nothing committed
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			committed, err := txncheck.Committed(cctx, []kgo.Opt{kgo.SeedBrokers(o.brokers...)}, r.Topic, r.Partition, r.Offset)
			if err != nil {
				return fmt.Errorf("read back the transaction of records %d..%d: %w", from, to-1, err)
			}
			if !committed {
				return fmt.Errorf("transaction of records %d..%d (%s/%d@%d): %w", from, to-1, r.Topic, r.Partition, r.Offset, txncheck.ErrAborted)
			}
		}
		return nil
	}
	i := 0
	if o.duration <= 0 {
		for i < o.n {
			end := min(i+100, o.n)
			if err := batch(i, end); err != nil {
				return st, err
			}
			i = end
		}
	} else {
		// paced: 10 ticks a second, o.n/10 records each, progress every second
		per := max(o.n/10, 1)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for time.Since(t0) < o.duration {
			select {
			case <-ctx.Done():
				return st, ctx.Err()
			case <-tick.C:
			}
			if err := batch(i, i+per); err != nil {
				return st, err
			}
			i += per
			if time.Since(last) >= time.Second {
				last = time.Now()
				mu.Lock()
				ml := st.maxLat
				mu.Unlock()
				fmt.Printf("t=%4.1fs sent=%d acked=%d failed=%d max-ack-latency=%v\n",
					time.Since(t0).Seconds(), i, ok.Load(), failed.Load(), ml.Round(time.Millisecond))
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return st, err
	}
	st.ok, st.failed = ok.Load(), failed.Load()
	el := time.Since(t0)
	fmt.Printf("produced %d records to %s (acks=all%s): %d acked, %d failed, in %v (%.0f rec/s), max ack latency %v\n",
		i, o.topic, map[bool]string{true: ", transactional", false: ""}[o.txn], st.ok, st.failed,
		el.Round(time.Millisecond), float64(st.ok)/el.Seconds(), st.maxLat.Round(time.Millisecond))
	if st.failed > 0 {
		return st, fmt.Errorf("%d records failed, first error: %w", st.failed, st.firstErr)
	}
	return st, nil
}

// consume reads the topic from the start through a consumer group until o.n
// records arrived (read_committed, so aborted transactional records are skipped),
// commits, and reports how the records were spread over partitions.
func consume(ctx context.Context, o opts) error {
	gopts := []kgo.Opt{
		kgo.SeedBrokers(o.brokers...),
		kgo.ConsumeTopics(o.topic),
		kgo.ConsumerGroup(o.group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
	}
	if o.nextGen {
		gopts = append(gopts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	}
	cl, err := kgo.NewClient(gopts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	t0 := time.Now()
	got := 0
	parts := map[int32]int{}
	var first time.Duration
	for got < o.n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("got %d of %d records: %w", got, o.n, ctx.Err())
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("%s-%d: %w", t, p, err))
		})
		if ferr != nil {
			return ferr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if got == 0 {
				first = time.Since(t0)
			}
			got++
			parts[r.Partition]++
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	proto := "classic"
	if o.nextGen {
		proto = "consumer (KIP-848)"
	}
	fmt.Printf("consumed %d records from %s via group %s (%s protocol), per partition %v, first record after %v, all in %v\n",
		got, o.topic, o.group, proto, parts, first.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	return nil
}

// smoke: create a topic, produce (plain and transactional), consume with both group
// protocols, delete the topic.
func smoke(ctx context.Context, o opts) error {
	if o.topic == "kafkacheck" {
		o.topic = "kafkacheck-smoke-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	}
	if err := create(ctx, o); err != nil {
		return err
	}
	if _, err := produce(ctx, o); err != nil {
		return err
	}
	t := o
	t.txn = true
	if _, err := produce(ctx, t); err != nil {
		return fmt.Errorf("transactional: %w", err)
	}
	c := o
	c.n = 2 * o.n
	if err := consume(ctx, c); err != nil {
		return err
	}
	c.group += "-848"
	c.nextGen = true
	if err := consume(ctx, c); err != nil {
		return err
	}
	if err := deleteTopic(ctx, o); err != nil {
		return err
	}
	fmt.Println("smoke OK")
	return nil
}

package fulfillment_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/ordersystem/service/fulfillment"
	"github.com/ordercast/ordercast/processor"
)

// benchEnv is a broker (kfake, or the cluster in KGO_SEEDS) with an input
// topic of n PAID paymentProcessed records in 6 partitions, and the serde.
type benchEnv struct {
	seeds []string
	serde *schema.Serde
	in    string // input topic
	out   string // output topic
	n     int
}

var benchRun atomic.Int64

func newBenchEnv(b *testing.B, n int) *benchEnv {
	b.Helper()
	ctx := context.Background()
	seeds := strings.Split(os.Getenv("KGO_SEEDS"), ",")
	if seeds[0] == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		seeds = c.ListenAddrs()
	}
	reg := srfake.NewRegistry()
	srv := httptest.NewServer(reg.Handler())
	b.Cleanup(srv.Close)
	srCl, err := sr.NewClient(sr.URLs(srv.URL))
	if err != nil {
		b.Fatal(err)
	}
	serde, err := schema.New(ctx, srCl)
	if err != nil {
		b.Fatal(err)
	}
	run := benchRun.Add(1)
	e := &benchEnv{seeds: seeds, serde: serde, n: n,
		in: fmt.Sprintf("bench-payments-%d-%d", os.Getpid(), run), out: fmt.Sprintf("bench-shipments-%d-%d", os.Getpid(), run)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(ctx, 6, -1, nil, e.in, e.out); err != nil {
		b.Fatal(err)
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		ev := order.PaymentProcessed{EventID: fmt.Sprintf("evt_%d", i), OrderID: fmt.Sprintf("ord_%d", i), CustomerID: fmt.Sprint(12000 + i%4000),
			Status: order.PaymentPaid, Method: order.MethodWallet, Amount: 15300, Country: "United Kingdom", ProcessedAt: time.Unix(1700000000, 0).UTC()}
		v, err := serde.Encode(order.TopicPaymentProcessed, &ev)
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = &kgo.Record{Topic: e.in, Key: []byte(ev.CustomerID), Value: v}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	return e
}

// fetchOpts bound each fetch (256 KiB, about 1,700 records) in both modes,
// so that a transaction or a commit spans many polls and the commit
// interval, not one giant poll of the backlog, decides its size.
var fetchOpts = []kgo.Opt{kgo.FetchMaxBytes(256 << 10), kgo.FetchMaxPartitionBytes(64 << 10)}

// transform is fulfillment's transform with the output redirected to the
// benchmark's topic.
func (e *benchEnv) transform() processor.TxnHandler {
	f := &fulfillment.Service{Serde: e.serde, Payments: benchRecords}
	return func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		in := *r
		in.Topic = order.TopicPaymentProcessed // the serde's subject
		outs, err := f.Transform(ctx, &in)
		for _, o := range outs {
			o.Topic = e.out
		}
		return outs, err
	}
}

// benchRecords confirms the payment of each order newBenchEnv wrote (the
// benchmark measures the transactions, not the database read).
var benchRecords = fulfillment.RecordsFunc(func(_ context.Context, orderID string) (fulfillment.Payment, bool, error) {
	var i int
	if _, err := fmt.Sscanf(orderID, "ord_%d", &i); err != nil {
		return fulfillment.Payment{}, false, nil
	}
	return fulfillment.Payment{CustomerID: fmt.Sprint(12000 + i%4000), Status: order.PaymentPaid, Method: order.MethodWallet,
		Amount: 15300, ProcessedAt: time.Unix(1700000000, 0).UTC()}, true, nil
})

// point is the group's committed offsets (summed over partitions) at a time.
type point struct {
	at        time.Time
	committed int64
}

// watch polls group's committed offsets every 2 ms until they reach the end
// of the input topic, and returns every change it saw: the commits.
func (e *benchEnv) watch(ctx context.Context, b *testing.B, group string) []point {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, e.in)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	var pts []point
	for {
		offs, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			var c int64
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Topic == e.in && o.Err == nil {
					c += o.At
				}
			})
			if n := len(pts); n == 0 || pts[n-1].committed != c {
				pts = append(pts, point{time.Now(), c})
			}
			if c >= total {
				return pts
			}
		}
		if ctx.Err() != nil {
			b.Fatalf("group %s did not commit the end of %s: %v", group, e.in, ctx.Err())
		}
		time.Sleep(2 * time.Millisecond) // the polling period of the observer, not a synchronisation
	}
}

// rate is the steady-state throughput in records/s: between the first
// commit and the last one before the final commit (which waits for the
// tail), so that neither the start-up nor the last interval counts.
func rate(b *testing.B, pts []point) (perSec float64, commits int) {
	var steps []point
	for _, p := range pts {
		if p.committed > 0 {
			steps = append(steps, p)
		}
	}
	if len(steps) < 4 {
		b.Fatalf("only %d commits observed: raise -benchtime (more records) for this commit interval", len(steps))
	}
	first, last := steps[0], steps[len(steps)-2]
	return float64(last.committed-first.committed) / last.at.Sub(first.at).Seconds(), len(steps)
}

// runTxn runs the shipped exactly-once stage (processor.NewTransactional,
// as system wires fulfillment) over the input; each transaction spans one
// commit interval (the record cap is lifted so that the interval decides).
func (e *benchEnv) runTxn(b *testing.B, interval time.Duration) []point {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	group := e.in + "-txn"
	t, err := processor.NewTransactional(group, e.transform(), processor.Brokers(e.seeds...), processor.Group(group),
		processor.Topics(e.in), processor.CommitInterval(interval), processor.MaxInFlight(1<<30, 1<<40), processor.ClientOpts(fetchOpts...),
		processor.CreateTopics(true)) // the stage checks its DLQ at start; the bench input has none beside it
	if err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- t.Run(rctx) }()
	pts := e.watch(ctx, b, group)
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return pts
}

// runPlain runs the same stage without transactions: poll, transform,
// produce (idempotent, acks=all), and every interval flush and commit the
// offsets (at least once: the outputs are durable before their offsets are
// committed). Same batching, same clients, no transaction.
func (e *benchEnv) runPlain(b *testing.B, interval time.Duration) []point {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	group := e.in + "-plain"
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(e.in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(), kgo.RequiredAcks(kgo.AllISRAcks())}, fetchOpts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	transform := e.transform()
	var failed atomic.Int64
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	waited := make(chan []point, 1)
	go func() { waited <- e.watch(ctx, b, group) }()
	deadline := time.Now().Add(interval)
	for {
		pctx, pcancel := context.WithDeadline(ctx, deadline)
		fs := cl.PollRecords(pctx, 0)
		pcancel()
		for _, r := range fs.Records() {
			outs, err := transform(ctx, r)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range outs {
				cl.Produce(ctx, o, promise)
			}
		}
		if !time.Now().Before(deadline) {
			if err := cl.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				b.Fatal(err)
			}
			deadline = time.Now().Add(interval)
		}
		select {
		case pts := <-waited:
			if failed.Load() > 0 {
				b.Fatalf("%d produces failed", failed.Load())
			}
			return pts
		default:
		}
	}
}

// BenchmarkFulfillmentEOS measures the fulfillment stage's steady-state
// throughput in the runtime's exactly-once mode against the same stage
// without transactions, at three commit intervals, and reports both rates
// and their ratio (docs/benchmarks.md). b.N is the number of input records
// (-benchtime 200000x; enough for a dozen commits at the interval); each
// record is PAID and yields one shipmentRequested. KGO_SEEDS=host:port runs
// it against a real cluster instead of the in-process kfake.
func BenchmarkFulfillmentEOS(b *testing.B) {
	for _, interval := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		b.Run("commit="+interval.String(), func(b *testing.B) {
			if b.N < 10000 {
				return // the framework's first probe (b.N = 1): nothing to measure
			}
			n := b.N
			plainEnv, txnEnv := newBenchEnv(b, n), newBenchEnv(b, n)
			b.ResetTimer()
			plainRate, plainCommits := rate(b, plainEnv.runPlain(b, interval))
			txnRate, txnCommits := rate(b, txnEnv.runTxn(b, interval))
			b.StopTimer()
			b.ReportMetric(txnRate, "txn-rec/s")
			b.ReportMetric(plainRate, "plain-rec/s")
			b.ReportMetric(txnRate/plainRate, "ratio")
			b.ReportMetric(float64(txnCommits), "txn-commits")
			b.ReportMetric(float64(plainCommits), "plain-commits")
			b.ReportMetric(0, "ns/op")
		})
	}
}

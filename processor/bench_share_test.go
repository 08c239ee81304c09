package processor

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// BenchmarkShareVsGroup: a notification-like handler (20 ms per record, no
// failures) on a topic of 6 partitions holding a backlog of 400,000 records
// of 100 B over 10,000 keys. 12 processors of a consumer group (New, key
// order, of which only 6 get a partition) against 12 processors of a share
// group (NewQueue, KIP-932), all with Concurrency 16, the share side with
// ShareSessions 1, 2 and 3. Each round runs the four sides one after the
// other (a new group each, from the start of the topic; the order turns
// every round), and each side is timed only once every member, every share
// session, has its assignment and the group has settled: the records
// handled in the next shareWindow, over its length. It reports the rates
// and the ratio of each share side to the consumer group, medians over the
// rounds (-benchtime Nx: N rounds).
//
// The consumer group's ceiling is 6 x 16 / 20 ms = 4,800 records/s, the
// share group's 12 x 16 / 20 ms = 9,600: the ratio can reach 2.
//
// ORDERCAST_BENCH_SHARE_WINDOW overrides the measured window (a Go
// duration; default 10s); ORDERCAST_BENCH_SHARE_SIDES the share sides
// (comma separated: shareN for N sessions, shareNxK for N sessions whose
// polls acquire up to K x Concurrency records, ShareAcquireMultiple(K);
// default share1,share2,share3).
func BenchmarkShareVsGroup(b *testing.B) {
	const (
		records, keys = 400_000, 10_000
		processors    = 12
		conc          = 16
		work          = 20 * time.Millisecond
	)
	window := 10 * time.Second
	if v := os.Getenv("ORDERCAST_BENCH_SHARE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("ORDERCAST_BENCH_SHARE_WINDOW: %v", err)
		}
		window = d
	}
	addrs, topic := benchBroker(b, "share", 6, benchSeed{records: records, size: 100, keys: keys})
	sides := []string{"group", "share1", "share2", "share3"}
	if v := os.Getenv("ORDERCAST_BENCH_SHARE_SIDES"); v != "" {
		sides = append([]string{"group"}, strings.Split(v, ",")...)
	}
	rates := map[string][]float64{}
	ratios := map[string][]float64{}
	b.ResetTimer()
	for i := range b.N {
		got := map[string]float64{}
		for j := range sides {
			side := sides[(i+j)%len(sides)]
			var handled int64
			var rate float64
			if side == "group" {
				rate, handled = groupPass(b, addrs, topic, processors, conc, work, window)
			} else {
				sessions, acquire := shareSide(b, side)
				rate, handled = sharePass(b, addrs, topic, processors, sessions, acquire, conc, work, window)
			}
			if handled >= records {
				b.Fatalf("%s: the backlog of %d records ran out (%d handled): the rate is not the steady one", side, records, handled)
			}
			got[side] = rate
			rates[side] = append(rates[side], rate)
		}
		line := fmt.Sprintf("round %d: group %.0f rec/s", i+1, got["group"])
		for _, side := range sides[1:] {
			ratios[side] = append(ratios[side], got[side]/got["group"])
			line += fmt.Sprintf(", %s %.0f rec/s (%.2fx)", side, got[side], got[side]/got["group"])
		}
		b.Log(line)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(rates["group"]), "group-rec/s")
	for _, side := range sides[1:] {
		b.ReportMetric(median(rates[side]), side+"-rec/s")
		b.ReportMetric(median(ratios[side]), side+"-ratio")
	}
}

// benchHandler sleeps d (the work of a notification: a call to a mail or
// push service) and counts the record.
func benchHandler(d time.Duration, handled *atomic.Int64) Handler {
	return func(ctx context.Context, r *kgo.Record) error {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		handled.Add(1)
		return nil
	}
}

// runners is a set of processors running until stop.
type runners struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

func startRunners(b *testing.B, rs []interface{ Run(context.Context) error }) *runners {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runners{cancel: cancel}
	for _, p := range rs {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := p.Run(ctx); err != nil {
				r.mu.Lock()
				r.err = err
				r.mu.Unlock()
			}
		}()
	}
	return r
}

func (r *runners) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *runners) stop(b *testing.B) {
	b.Helper()
	r.cancel()
	r.wg.Wait()
	if err := r.failed(); err != nil {
		b.Fatal(err)
	}
}

// measure waits until settled reports true (checking that no processor
// failed), then returns the rate of handled over window and its count at
// the end.
func measure(b *testing.B, r *runners, what string, settled func() bool, handled *atomic.Int64, window time.Duration) (float64, int64) {
	b.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !settled() {
		if err := r.failed(); err != nil {
			b.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not settled after 3 minutes", what)
		}
		time.Sleep(100 * time.Millisecond) // polling an admin API
	}
	c0, t0 := handled.Load(), time.Now()
	time.Sleep(window) // the measured window
	c1, t1 := handled.Load(), time.Now()
	if err := r.failed(); err != nil {
		b.Fatalf("%s: %v", what, err)
	}
	return float64(c1-c0) / t1.Sub(t0).Seconds(), c1
}

// groupPass runs n processors of a new consumer group (New, key order)
// over topic and measures them once the group is stable with every member
// in it and the 6 partitions assigned.
func groupPass(b *testing.B, addrs []string, topic string, n, conc int, work, window time.Duration) (float64, int64) {
	b.Helper()
	g := benchGroup("group")
	var handled atomic.Int64
	var ps []interface{ Run(context.Context) error }
	for range n {
		p, err := New(Brokers(addrs...), Group(g), Topics(topic), WithHandler(benchHandler(work, &handled)), DeadLetter(false),
			WithOrdering(OrderKey), Concurrency(conc), CommitInterval(100*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, p)
	}
	adm := benchAdmin(b, addrs)
	r := startRunners(b, ps)
	defer r.stop(b)
	return measure(b, r, "consumer group "+g, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gs, err := adm.DescribeGroups(ctx, g)
		if err != nil {
			return false
		}
		d := gs[g]
		if d.Err != nil || d.State != "Stable" || len(d.Members) != n {
			return false
		}
		assigned := 0
		for _, m := range d.Members {
			if ca, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range ca.Topics {
					assigned += len(t.Partitions)
				}
			}
		}
		return assigned == 6
	}, &handled, window)
}

// sharePass runs n processors of a new share group (NewQueue, sessions
// share sessions each) over topic and measures them once the group lists
// every session as a member with an assignment.
func sharePass(b *testing.B, addrs []string, topic string, n, sessions, acquire, conc int, work, window time.Duration) (float64, int64) {
	b.Helper()
	g := benchGroup("share")
	b.Cleanup(func() {
		_ = alterGroupConfig(addrs, g, "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpDelete, nil)
	})
	var handled atomic.Int64
	var ps []interface{ Run(context.Context) error }
	for range n {
		q, err := NewQueue(Brokers(addrs...), Group(g), Topics(topic), WithHandler(benchHandler(work, &handled)), DeadLetter(false),
			Concurrency(conc), ShareSessions(sessions), ShareAcquireMultiple(acquire))
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, q)
	}
	adm := benchAdmin(b, addrs)
	r := startRunners(b, ps)
	defer r.stop(b)
	return measure(b, r, "share group "+g, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gs, err := adm.DescribeShareGroups(ctx, g)
		if err != nil {
			return false
		}
		d := gs[g]
		if d.Err != nil || d.GroupState != "Stable" || len(d.Members) != n*sessions {
			return false
		}
		for _, m := range d.Members {
			if len(m.Assignment[topic]) == 0 || m.MemberEpoch != d.AssignmentEpoch {
				return false
			}
		}
		return true
	}, &handled, window)
}

// shareSide reads a share side's name: "shareN" (N share sessions, k = 1
// whatever the default) or
// "shareNxK" (N sessions, each poll acquiring up to K x Concurrency
// records: ShareAcquireMultiple(K)).
func shareSide(b *testing.B, side string) (sessions, acquire int) {
	b.Helper()
	n, k, _ := strings.Cut(strings.TrimPrefix(side, "share"), "x")
	sessions, err := strconv.Atoi(n)
	acquire = 1
	if err == nil && k != "" {
		acquire, err = strconv.Atoi(k)
	}
	if err != nil || !strings.HasPrefix(side, "share") || sessions < 1 || acquire < 1 {
		b.Fatalf("share side %q: want shareN or shareNxK", side)
	}
	return sessions, acquire
}

// benchAdmin returns an admin client of addrs, closed at the end of the
// benchmark.
func benchAdmin(b *testing.B, addrs []string) *kadm.Client {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

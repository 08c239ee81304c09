package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordercast/ordercast/processor"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The members curve: one topic fed at a steady open-loop rate, and a group
// whose members join one at a time up to --max, then leave one at a time
// down to one. After each change (made after a random wait below
// --jitter) the harness waits until the new assignment is in place and
// from then on the group's aggregate handling rate is within --tolerance of
// the producer's for --steady-for, and records per change those times, the
// records handled more than once and the rate during the change:
//
//	go run . members --brokers B --out results/scaling --max 24 --partitions 48 --rate 30000
//	go run . members-report --out results/scaling    # the table and plot again from the JSON
//
// The members are goroutines of this process, each with its own client (a
// raw franz-go poll loop, or the processor with its defaults), so that every
// record handled is counted by (partition, offset) in one place; the
// producer runs here too. Each ramp (a protocol and a consumer) has a topic
// and group of its own; the ramps run A B B A (classic raw, classic
// processor, consumer processor, consumer raw).

type membersFlags struct {
	brokers, out, protocols, clients  string
	max, partitions, valueBytes, rate int
	keys                              int
	tolerance                         float64
	steadyFor, changeTimeout, jitter  time.Duration
}

// memberChange is one membership change of one ramp: From members to To.
type memberChange struct {
	Protocol string `json:"protocol"`
	Client   string `json:"client"`
	From     int    `json:"from"`
	To       int    `json:"to"`
	// SteadySeconds is the time from the change (a member's client
	// created, or its stop begun) to the start of the first 1 s window,
	// beginning once the assignment was in place (SettledSeconds), of a
	// span of SteadyFor in which every 1 s window's handling rate is
	// within the tolerance of the producer's rate in that window; -1 when
	// that did not happen within the change timeout.
	SteadySeconds float64 `json:"steady_seconds"`
	// SettledSeconds is the time from the change until the assignment
	// was in place (tracker.settled); -1 when it was not within the
	// change timeout.
	SettledSeconds float64 `json:"settled_seconds"`
	// StopSeconds is, for a leave, how long the leaving member took to
	// stop (drain, commit, leave the group).
	StopSeconds float64 `json:"stop_seconds,omitempty"`
	// Duplicates are the records handled during the change (until steady)
	// whose (partition, offset) had been handled before, by any member.
	Duplicates int64 `json:"duplicates"`
	// Handled and Produced are the records handled and acknowledged to
	// the producer from the change to steady.
	Handled  int64 `json:"handled"`
	Produced int64 `json:"produced"`
	// MinRate is the lowest 1 s handling rate during the change, over the
	// producer's rate in the same window.
	MinRate float64 `json:"min_rate"`
	// CPU is the process's CPU time over wall time in the steady span
	// (cores, 2 at most here): producer and members together.
	CPU   float64 `json:"cpu_cores"`
	Load1 float64 `json:"load1"`
}

type membersResults struct {
	Started  time.Time         `json:"started"`
	Params   map[string]string `json:"params"`
	Versions map[string]string `json:"versions"`
	CPU      string            `json:"cpu_model"`
	Changes  []memberChange    `json:"changes"`
	// Ramps holds, per protocol/client, the records produced and handled
	// over the whole ramp and the records handled more than once.
	Ramps []membersRamp `json:"ramps"`
}

type membersRamp struct {
	Protocol   string  `json:"protocol"`
	Client     string  `json:"client"`
	Produced   int64   `json:"produced"`
	Handled    int64   `json:"handled"`
	Duplicates int64   `json:"duplicates"`
	Seconds    float64 `json:"seconds"`
	Err        string  `json:"error,omitempty"`
}

// tracker counts what the members handled: how often each (partition,
// offset) was handled, the records handled in all and those handled more
// than once; and who handles each partition: its last member and since
// when, and when each member first handled each partition.
type tracker struct {
	parts   []trackedPartition
	handled atomic.Int64
	dups    atomic.Int64

	mu    sync.Mutex
	first map[int][]atomic.Int64 // member → partition → UnixNano of its first record there
}

type trackedPartition struct {
	owner      atomic.Int64 // the member that handled its last record, -1 before any
	ownedSince atomic.Int64 // UnixNano of owner's first record since it took the partition over
	mu         sync.Mutex
	seen       []uint8 // by offset: times handled, saturating at 255
}

func newTracker(partitions int) *tracker {
	t := &tracker{parts: make([]trackedPartition, partitions), first: map[int][]atomic.Int64{}}
	for i := range t.parts {
		t.parts[i].owner.Store(-1)
	}
	return t
}

// member registers member id and returns its first-record times.
func (t *tracker) member(id int) []atomic.Int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.first[id] == nil {
		t.first[id] = make([]atomic.Int64, len(t.parts))
	}
	return t.first[id]
}

// handle records one record handled by member id (first: its
// first-record times, from member). Safe for concurrent use.
func (t *tracker) handle(id int, first []atomic.Int64, partition int32, offset int64) {
	p := &t.parts[partition]
	if p.owner.Load() != int64(id) {
		now := time.Now().UnixNano()
		p.ownedSince.Store(now)
		p.owner.Store(int64(id))
		if first[partition].Load() == 0 {
			first[partition].Store(now)
		}
	}
	p.mu.Lock()
	if offset >= int64(len(p.seen)) {
		n := max(2*len(p.seen), int(offset)+1, 1<<16)
		p.seen = append(p.seen, make([]uint8, n-len(p.seen))...)
	}
	c := p.seen[offset]
	if c < 255 {
		p.seen[offset] = c + 1
	}
	p.mu.Unlock()
	if c > 0 {
		t.dups.Add(1)
	}
	t.handled.Add(1)
}

// countSample is the cumulative counts at one instant.
type countSample struct {
	at                      time.Time
	handled, produced, dups int64
	cpu                     float64
}

// sampler records the counts every 100 ms.
type sampler struct {
	mu      sync.Mutex
	samples []countSample
}

func (s *sampler) run(ctx context.Context, tr *tracker, produced *atomic.Int64) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		s.samples = append(s.samples, countSample{at: time.Now(), handled: tr.handled.Load(), produced: produced.Load(), dups: tr.dups.Load(), cpu: cpuNow()})
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *sampler) since(t time.Time) []countSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.samples)
	for i > 0 && !s.samples[i-1].at.Before(t) {
		i--
	}
	if i > 0 {
		i-- // the last sample before t: the windows start at it
	}
	return append([]countSample(nil), s.samples[i:]...)
}

// settled returns when the assignment after a change was in place: for a
// join, when the new member had handled records of its share of the
// partitions (partitions / members, rounded down: the sticky assignors
// balance to within one); for a leave, when every partition the leaving
// member had handled last was handled by another. ok is false until then.
func (t *tracker) settled(join bool, id, members int, left []int32) (at time.Time, ok bool) {
	if join {
		var ts []int64
		first := t.member(id)
		for i := range first {
			if v := first[i].Load(); v != 0 {
				ts = append(ts, v)
			}
		}
		share := len(t.parts) / members
		if len(ts) < share || len(ts) == 0 {
			return time.Time{}, false
		}
		slices.Sort(ts)
		return time.Unix(0, ts[max(share, 1)-1]), true
	}
	var last int64
	for _, p := range left {
		if t.parts[p].owner.Load() == int64(id) {
			return time.Time{}, false
		}
		last = max(last, t.parts[p].ownedSince.Load())
	}
	return time.Unix(0, last), true
}

// owned are the partitions member id handled last.
func (t *tracker) owned(id int) []int32 {
	var ps []int32
	for i := range t.parts {
		if t.parts[i].owner.Load() == int64(id) {
			ps = append(ps, int32(i))
		}
	}
	return ps
}

// waitSteady waits, after a change at t0, until the new assignment is in
// place (settled) and from then on the handling rate is back at the
// producer's rate, and fills in the change's figures.
func waitSteady(s *sampler, t0 time.Time, f membersFlags, c *memberChange, settled func() (time.Time, bool)) {
	deadline := t0.Add(f.changeTimeout)
	c.SteadySeconds, c.SettledSeconds = -1, -1
	for {
		time.Sleep(200 * time.Millisecond)
		at, ok := settled()
		if !ok {
			if time.Now().After(deadline) {
				ss := s.since(t0)
				a, b := ss[0], ss[len(ss)-1]
				c.Handled, c.Produced, c.Duplicates, c.Load1 = b.handled-a.handled, b.produced-a.produced, b.dups-a.dups, load1()
				return
			}
			continue
		}
		c.SettledSeconds = math.Max(0, at.Sub(t0).Seconds())
		ss := s.since(t0)
		// ok[i]: the 1 s window ending at ss[i] is within the tolerance.
		inTol := func(a, b countSample) (float64, bool) {
			p := float64(b.produced - a.produced)
			if p <= 0 {
				return math.NaN(), false
			}
			r := float64(b.handled-a.handled) / p
			return r, math.Abs(r-1) <= f.tolerance
		}
		j := 0 // ss[j] is the sample about 1 s before ss[i]
		runStart := -1
		minRate := math.Inf(1)
		for i := range ss {
			for j+1 < i && ss[i].at.Sub(ss[j+1].at) >= time.Second {
				j++
			}
			if ss[i].at.Sub(ss[j].at) < time.Second {
				continue
			}
			r, ok := inTol(ss[j], ss[i])
			if !ok {
				runStart = -1
				if !math.IsNaN(r) {
					minRate = math.Min(minRate, r)
				}
				continue
			}
			if runStart < 0 && !ss[j].at.Before(at) {
				runStart = j // the steady span starts where its first window does, once settled
			}
			if runStart < 0 {
				continue
			}
			if ss[i].at.Sub(ss[runStart].at) >= f.steadyFor+time.Second {
				a, b := ss[0], ss[runStart]
				c.SteadySeconds = math.Max(0, b.at.Sub(t0).Seconds())
				c.Handled, c.Produced, c.Duplicates = b.handled-a.handled, b.produced-a.produced, b.dups-a.dups
				if math.IsInf(minRate, 1) {
					minRate, _ = inTol(ss[runStart], ss[i])
				}
				c.MinRate = minRate
				c.CPU = (ss[i].cpu - b.cpu) / ss[i].at.Sub(b.at).Seconds()
				c.Load1 = load1()
				return
			}
		}
		if time.Now().After(deadline) {
			a, b := ss[0], ss[len(ss)-1]
			c.Handled, c.Produced, c.Duplicates = b.handled-a.handled, b.produced-a.produced, b.dups-a.dups
			if math.IsInf(minRate, 1) {
				minRate = 0
			}
			c.MinRate, c.Load1 = minRate, load1()
			return
		}
	}
}

// feed produces records of valueBytes over keys at rate records/s
// (open loop: what is due by the clock, every 5 ms) until ctx ends, counting
// the records acknowledged.
func feed(ctx context.Context, cl *kgo.Client, topic string, rate, valueBytes, keys int, acked *atomic.Int64, errc chan<- error) {
	v := make([]byte, valueBytes)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range v {
		v[i] = byte(rng.Uint32())
	}
	keyOf := make([][]byte, keys)
	for i := range keyOf {
		keyOf[i] = []byte("k" + strconv.Itoa(i))
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var sent int64
	var once sync.Once
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			if ctx.Err() == nil {
				once.Do(func() { errc <- fmt.Errorf("produce: %w", err) })
			}
			return
		}
		acked.Add(1)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			due := int64(now.Sub(start).Seconds() * float64(rate))
			for ; sent < due; sent++ {
				cl.Produce(ctx, &kgo.Record{Topic: topic, Key: keyOf[sent%int64(keys)], Value: v}, cb)
			}
		}
	}
}

// startMember starts one member of group and returns its stop, which
// blocks until the member has stopped (committed and left the group).
func startMember(id int, client, protocol string, brokers []string, topic, group string, tr *tracker, errc chan<- error) (func(), error) {
	first := tr.member(id)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	report := func(err error) {
		if err != nil && ctx.Err() == nil {
			select {
			case errc <- err:
			default:
			}
		}
	}
	switch client {
	case "raw":
		cl, err := rawMemberClient(protocol, brokers, topic, group)
		if err != nil {
			cancel()
			return nil, err
		}
		go func() {
			defer close(done)
			report(rawMemberLoop(ctx, cl, func(r *kgo.Record) { tr.handle(id, first, r.Partition, r.Offset) }))
		}()
	case "processor":
		opts := []processor.Opt{
			processor.Brokers(brokers...), processor.Group(group), processor.Topics(topic),
			processor.DeadLetter(false), processor.GroupProtocol(protocol),
			processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
				tr.handle(id, first, r.Partition, r.Offset)
				return nil
			}),
		}
		p, err := processor.New(opts...)
		if err != nil {
			cancel()
			return nil, err
		}
		go func() {
			defer close(done)
			if err := p.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				report(fmt.Errorf("processor: %w", err))
			}
		}()
	default:
		cancel()
		return nil, fmt.Errorf("members: unknown client %q (raw, processor)", client)
	}
	return func() { cancel(); <-done }, nil
}

// rawMemberClient is the sweep's raw poll loop's client (consumeRaw:
// auto-commit of marked records every 5 s, rebalances held off while a
// poll's records are handled) in the given group protocol: classic with
// the cooperative-sticky balancer, or KIP-848 (franz-go needs a
// server-side balancer name, sticky, as the processor gives it).
func rawMemberClient(protocol string, brokers []string, topic, group string) (*kgo.Client, error) {
	o := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.AutoCommitMarks(), kgo.BlockRebalanceOnPoll()}
	switch protocol {
	case "classic":
		o = append(o, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	case "consumer":
		o = append(o, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	default:
		return nil, fmt.Errorf("members: unknown protocol %q (classic, consumer)", protocol)
	}
	return kgo.NewClient(o...)
}

// rawMemberLoop is consumeRaw's no-op loop: each record handled, then
// marked; on stop the marks are committed and the client closed (leaving
// the group).
func rawMemberLoop(ctx context.Context, cl *kgo.Client, handle func(*kgo.Record)) error {
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			break
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err) })
		if ferr != nil {
			cl.AllowRebalance()
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			handle(r)
			cl.MarkCommitRecords(r)
		})
		cl.AllowRebalance()
	}
	return cl.CommitMarkedOffsets(context.Background())
}

func membersMain(args []string) error {
	var f membersFlags
	fs := flag.NewFlagSet("members", flag.ExitOnError)
	fs.StringVar(&f.brokers, "brokers", "127.0.0.1:9092", "seed brokers, comma separated")
	fs.StringVar(&f.out, "out", "results/scaling", "directory for members.json/.md/.svg/.png")
	fs.StringVar(&f.protocols, "protocols", "classic,consumer", "group protocols: classic (cooperative-sticky), consumer (KIP-848)")
	fs.StringVar(&f.clients, "clients", "raw,processor", "members: raw (franz-go poll loop), processor (the runtime's defaults)")
	fs.IntVar(&f.max, "max", 24, "members at the top of the ramp")
	fs.IntVar(&f.partitions, "partitions", 48, "partitions of the topic")
	fs.IntVar(&f.rate, "rate", 20000, "records/s offered by the producer")
	fs.IntVar(&f.valueBytes, "value-bytes", 1024, "record value size, bytes (random, uncompressed)")
	fs.IntVar(&f.keys, "keys", 10000, "distinct keys")
	fs.Float64Var(&f.tolerance, "tolerance", 0.10, "steady: every 1 s handling rate within this fraction of the producer's")
	fs.DurationVar(&f.steadyFor, "steady-for", 2*time.Second, "steady: for this long")
	fs.DurationVar(&f.changeTimeout, "change-timeout", 90*time.Second, "give up waiting for steady after this long")
	fs.DurationVar(&f.jitter, "jitter", 5*time.Second, "wait a random time below this before each change, so that a change falls at a random phase of the members' heartbeats (which restart with each rebalance)")
	fs.Parse(args)

	brokers := strings.Split(f.brokers, ",")
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	res := &membersResults{Started: time.Now().UTC(), CPU: cpuModel(), Versions: versions("node", brokers), Params: map[string]string{
		"max": strconv.Itoa(f.max), "partitions": strconv.Itoa(f.partitions), "rate": strconv.Itoa(f.rate),
		"value_bytes": strconv.Itoa(f.valueBytes), "keys": strconv.Itoa(f.keys), "tolerance": fmt.Sprint(f.tolerance),
		"steady_for": f.steadyFor.String(), "change_timeout": f.changeTimeout.String(), "jitter": f.jitter.String(),
	}}
	delete(res.Versions, "node")
	delete(res.Versions, "kafkajs")
	// A B B A: every other protocol runs its consumers in reverse order.
	var ramps [][2]string
	clients := strings.Split(f.clients, ",")
	for i, p := range strings.Split(f.protocols, ",") {
		for j := range clients {
			c := clients[j]
			if i%2 == 1 {
				c = clients[len(clients)-1-j]
			}
			ramps = append(ramps, [2]string{p, c})
		}
	}
	for _, r := range ramps {
		ramp, err := runRamp(f, brokers, r[0], r[1], res)
		if err != nil {
			ramp.Err = err.Error()
			logf("members %s %s: %v", r[0], r[1], err)
		}
		res.Ramps = append(res.Ramps, ramp)
		if err := writeMembers(f.out, res); err != nil {
			return err
		}
	}
	return membersReport(f.out, res)
}

func runRamp(f membersFlags, brokers []string, protocol, client string, res *membersResults) (membersRamp, error) {
	ramp := membersRamp{Protocol: protocol, Client: client}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic := fmt.Sprintf("members-%s-%s", protocol, client)
	group := fmt.Sprintf("%s-%d", topic, time.Now().UnixNano())
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.UnknownTopicRetries(-1))
	if err != nil {
		return ramp, err
	}
	defer pcl.Close()
	adm := kadm.NewClient(pcl)
	deleteTopic(ctx, adm, topic)
	// Old segments go (the broker looks every 5 minutes): a ramp writes
	// about rate × value bytes per second.
	cfg := map[string]*string{"retention.bytes": ptr(strconv.Itoa(256 << 20)), "segment.bytes": ptr(strconv.Itoa(64 << 20))}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		resp, err := adm.CreateTopic(ctx, int32(f.partitions), 1, cfg, topic)
		if err == nil && resp.Err == nil {
			break
		}
		if time.Now().After(deadline) {
			return ramp, fmt.Errorf("create %s: %v %v", topic, err, resp.Err)
		}
	}
	defer deleteTopic(context.Background(), adm, topic)

	tr := newTracker(f.partitions)
	var produced atomic.Int64
	errc := make(chan error, 1)
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	go feed(fctx, pcl, topic, f.rate, f.valueBytes, f.keys, &produced, errc)
	var s sampler
	go s.run(ctx, tr, &produced)
	start := time.Now()
	logf("members %s %s: topic %s, %d partitions, %d records/s of %d B", protocol, client, topic, f.partitions, f.rate, f.valueBytes)

	var stops []func()
	defer func() {
		for _, st := range stops {
			st()
		}
	}()
	change := func(from, to int) error {
		c := memberChange{Protocol: protocol, Client: client, From: from, To: to}
		if f.jitter > 0 {
			time.Sleep(rand.N(f.jitter))
		}
		t0 := time.Now()
		var settled func() (time.Time, bool)
		if to > from {
			id := len(stops)
			st, err := startMember(id, client, protocol, brokers, topic, group, tr, errc)
			if err != nil {
				return err
			}
			stops = append(stops, st)
			settled = func() (time.Time, bool) { return tr.settled(true, id, to, nil) }
		} else {
			id := len(stops) - 1
			left := tr.owned(id)
			stops[id]()
			stops = stops[:id]
			c.StopSeconds = time.Since(t0).Seconds()
			settled = func() (time.Time, bool) { return tr.settled(false, id, to, left) }
		}
		waitSteady(&s, t0, f, &c, settled)
		logf("members %s %-9s %2d→%2d: settled %6.2fs, steady %6.2fs (stop %.2fs), %6d dup, min rate %.2f, handled/produced %d/%d, %.2f cores, load %.1f",
			protocol, client, from, to, c.SettledSeconds, c.SteadySeconds, c.StopSeconds, c.Duplicates, c.MinRate, c.Handled, c.Produced, c.CPU, c.Load1)
		res.Changes = append(res.Changes, c)
		select {
		case err := <-errc:
			return err
		default:
		}
		return writeMembers(f.out, res)
	}
	for n := 0; n < f.max; n++ {
		if err := change(n, n+1); err != nil {
			return ramp, err
		}
	}
	for n := f.max; n > 1; n-- {
		if err := change(n, n-1); err != nil {
			return ramp, err
		}
	}
	stopFeed()
	ramp.Seconds = time.Since(start).Seconds()
	ramp.Produced, ramp.Handled, ramp.Duplicates = produced.Load(), tr.handled.Load(), tr.dups.Load()
	return ramp, nil
}

func ptr[T any](v T) *T { return &v }

func writeMembers(dir string, res *membersResults) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "members.json"), b, 0o644)
}

func membersReportMain(args []string) error {
	fs := flag.NewFlagSet("members-report", flag.ExitOnError)
	out := fs.String("out", "results/scaling", "directory holding members.json")
	fs.Parse(args)
	b, err := os.ReadFile(filepath.Join(*out, "members.json"))
	if err != nil {
		return err
	}
	var res membersResults
	if err := json.Unmarshal(b, &res); err != nil {
		return err
	}
	return membersReport(*out, &res)
}

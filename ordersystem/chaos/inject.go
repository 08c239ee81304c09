package chaos

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ordercast/ordercast/internal/ctxtime"
	"github.com/ordercast/ordercast/ordersystem/store"
)

// injector injects the process faults at random, with a seeded RNG.
type injector struct {
	cfg  *Config
	c    *cluster
	hist *history
	scr  *scraper
	rng  *rand.Rand

	episodes                      sync.WaitGroup // stop, scale and broker episodes in the background
	stopping, scaling, restarting atomic.Bool
	lastBroker                    time.Time // of the last broker restart; run's goroutine only

	// A real cluster's faults (Config.Cluster): rc nil on the embedded
	// broker. db is the harness's connection (pg_terminate_backend).
	rc                 *realCluster
	db                 *store.DB
	adminCl            *kgo.Client // direct, for the active controller
	nodeDown, netFault atomic.Bool // a node killed or paused; a net fault on
	pgRestarting       atomic.Bool
	brokerKills        int // run's goroutine only
	lastPG             time.Time
	rec                *recoveries // fault ends, for the recovery times
}

// faultWeights make SIGKILL the most frequent fault, and the slow ones
// (a broker restart stalls every group for seconds) the rarest.
var faultWeights = map[string]int{FaultKill: 4, FaultTerm: 2, FaultStop: 2, FaultScale: 1, FaultBroker: 1,
	FaultBrokerKill: 2, FaultBrokerPause: 1, FaultPGRestart: 1, FaultPGTerminate: 2,
	FaultNetLatency: 1, FaultNetReset: 2, FaultNetHold: 2, FaultNetOneWay: 1}

// brokerPause is how long FaultBrokerPause keeps a node stopped: past the
// controller's broker.session.timeout.ms (9 s) and kgo's request timeout
// overhead (10 s).
const brokerPause = 15 * time.Second

// brokerRestartGap is the least time between two broker restarts.
const brokerRestartGap = 15 * time.Second

// run injects faults until ctx ends (the end of the fault phase).
func (in *injector) run(ctx context.Context) {
	var kinds []string // each enabled fault, repeated by its weight
	for _, f := range ProcessFaults {
		if in.cfg.enabled(f) {
			for range faultWeights[f] {
				kinds = append(kinds, f)
			}
		}
	}
	if len(kinds) == 0 {
		return
	}
	// Every enabled kind once first, in random order, so that a short run
	// covers them all; then weighted draws.
	var first []string
	for _, f := range ProcessFaults {
		if in.cfg.enabled(f) {
			first = append(first, f)
		}
	}
	in.rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	for n := 0; ; n++ {
		d := in.cfg.FaultEvery/2 + time.Duration(in.rng.Int64N(int64(in.cfg.FaultEvery)))
		if !ctxtime.Sleep(ctx, d) {
			return
		}
		kind := kinds[in.rng.IntN(len(kinds))]
		if n < len(first) {
			kind = first[n]
		}
		in.inject(ctx, kind)
	}
}

// target picks a running, not stopped service process.
func (in *injector) target() *proc {
	var live []*proc
	for _, p := range in.c.list("") {
		if _, _, running, stopped := p.snapshot(); running && !stopped {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[in.rng.IntN(len(live))]
}

func (in *injector) record(kind string, p *proc, detail string) {
	e := event{Ev: "fault", Fault: kind, Detail: detail}
	if p != nil {
		pid, incarn, _, _ := p.snapshot()
		e.Proc, e.PID, e.Incarnation = p.name, pid, incarn
	}
	in.hist.add(e)
	fmt.Fprintf(in.cfg.Out, "chaos: %s %s %s\n", kind, e.Proc, detail)
}

func (in *injector) inject(ctx context.Context, kind string) {
	switch kind {
	case FaultKill, FaultTerm:
		p := in.target()
		if p == nil {
			return
		}
		in.scr.scrape(ctx, p) // its counters, before they die with it
		sig := syscall.SIGKILL
		if kind == FaultTerm {
			sig = syscall.SIGTERM
		}
		if in.c.signal(p, sig) {
			in.record(kind, p, "")
			in.ended(kind, p.name)
		}
	case FaultStop:
		if !in.stopping.CompareAndSwap(false, true) {
			return
		}
		p := in.target()
		if p == nil || !in.c.signal(p, syscall.SIGSTOP) {
			in.stopping.Store(false)
			return
		}
		d := in.cfg.SessionTimeout + 2*time.Second
		in.record(kind, p, fmt.Sprintf("for %v", d))
		in.episodes.Add(1)
		go func() {
			defer in.episodes.Done()
			defer in.stopping.Store(false)
			ctxtime.Sleep(ctx, d) // the zombie's pause (cut short when the fault phase ends)
			in.c.signal(p, syscall.SIGCONT)
			in.hist.add(event{Ev: "fault", Fault: "cont", Proc: p.name})
			in.ended(kind, p.name)
		}()
	case FaultScale:
		if !in.scaling.CompareAndSwap(false, true) {
			return
		}
		group := Services[in.rng.IntN(len(Services))]
		in.record(kind, nil, group+" 1 -> 4 -> 1")
		in.episodes.Add(1)
		go func() {
			defer in.episodes.Done()
			defer in.scaling.Store(false)
			for _, step := range []struct {
				n    int
				hold time.Duration
			}{{1, 6 * time.Second}, {4, 10 * time.Second}, {1, 6 * time.Second}} {
				in.scale(ctx, group, step.n)
				if !ctxtime.Sleep(ctx, step.hold) {
					break
				}
			}
			in.scale(context.Background(), group, in.cfg.Instances)
			in.ended(kind, group)
		}()
	case FaultBroker:
		if time.Since(in.lastBroker) < brokerRestartGap || !in.restarting.CompareAndSwap(false, true) {
			return
		}
		in.lastBroker = time.Now()
		in.record(kind, in.c.list("devstack")[0], "restart on the same data directory")
		in.episodes.Add(1)
		go func() {
			defer in.episodes.Done()
			defer in.restarting.Store(false)
			in.restartBroker()
			in.ended(kind, "devstack")
		}()
	default:
		in.injectCluster(ctx, kind)
	}
}

// ended records the end of a fault: the recovery times count from it.
func (in *injector) ended(kind, target string) {
	if in.rec != nil {
		in.rec.faultEnded(kind, target)
	}
}

// scale sets the number of processes of a consumer service to n: slots
// 1..n wanted and started, the others stopped with SIGTERM.
func (in *injector) scale(ctx context.Context, service string, n int) {
	slots := len(in.c.list(service))
	for i := 1; i <= max(n, slots); i++ {
		p, err := in.c.slot(service, i)
		if err != nil {
			continue
		}
		if i <= n {
			if err := in.c.start(p); err != nil {
				in.hist.add(event{Ev: "start_failed", Proc: p.name, Detail: err.Error()})
			}
		} else {
			in.scr.scrape(ctx, p)
			in.c.stopSlot(p, syscall.SIGTERM, 20*time.Second)
		}
	}
	in.hist.add(event{Ev: "scale", Proc: service, Detail: fmt.Sprint(n)})
}

// restartBroker stops the devstack process cleanly and starts it again.
func (in *injector) restartBroker() {
	ds := in.c.list("devstack")[0]
	in.c.stopSlot(ds, syscall.SIGTERM, 30*time.Second)
	for attempt := 0; ; attempt++ {
		err := in.c.start(ds)
		if err == nil {
			return
		}
		in.hist.add(event{Ev: "start_failed", Proc: ds.name, Detail: err.Error()})
		if attempt >= 20 {
			fmt.Fprintf(in.cfg.Out, "chaos: the broker does not come back: %v\n", err)
			return
		}
		time.Sleep(500 * time.Millisecond) // the port may still be held briefly
	}
}

// finish ends the fault phase: it waits for the running episodes (they see
// ctx done and restore the configured count), then brings every process
// back: SIGCONT, restart what is down, scale to the configured counts.
func (in *injector) finish() {
	in.episodes.Wait()
	for _, p := range in.c.list("") {
		in.c.signal(p, syscall.SIGCONT)
	}
	for _, s := range Services {
		in.scale(context.Background(), s, in.cfg.Instances)
	}
	for _, p := range in.c.list("checkout") {
		_ = in.c.start(p)
	}
	_ = in.c.start(in.c.list("devstack")[0])
}

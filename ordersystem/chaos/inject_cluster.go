package chaos

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/ctxtime"
	"github.com/ordercast/ordercast/internal/faultproxy"
)

// nodeGap is the least time between two node faults (kill or pause): one
// node down at a time, so acks=all with min.insync.replicas 2 can go on.
const nodeGap = 20 * time.Second

// pgGap is the least time between two PostgreSQL restarts.
const pgGap = 15 * time.Second

// holdKeys are the requests FaultNetHold holds: those whose late delivery
// commits something the client gave up on.
var holdKeys = []int16{int16(kmsg.Produce), int16(kmsg.OffsetCommit), int16(kmsg.TxnOffsetCommit), int16(kmsg.EndTxn), int16(kmsg.AddOffsetsToTxn)}

// injectCluster injects the faults of a real cluster; a fault whose
// episode is still running (or too recent) is skipped.
func (in *injector) injectCluster(ctx context.Context, kind string) {
	rc := in.rc
	if rc == nil {
		return
	}
	switch kind {
	case FaultBrokerKill, FaultBrokerPause:
		if time.Since(in.lastBroker) < nodeGap || !in.nodeDown.CompareAndSwap(false, true) {
			return
		}
		in.lastBroker = time.Now()
		node := 1 + in.rng.IntN(rc.nodes)
		what := ""
		if kind == FaultBrokerKill {
			in.brokerKills++
			if in.brokerKills%2 == 1 { // every other kill: the active controller
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if id, err := activeController(cctx, in.adminCl); err == nil && id >= 1 && int(id) <= rc.nodes {
					node, what = int(id), " (the active controller)"
				}
				cancel()
			}
		}
		name := fmt.Sprintf("kafka-%d", node)
		down := 3*time.Second + time.Duration(in.rng.Int64N(int64(3*time.Second)))
		in.episodes.Add(1)
		go func() {
			defer in.episodes.Done()
			defer in.nodeDown.Store(false)
			if kind == FaultBrokerKill {
				if _, err := rc.kafka(context.Background(), "stop-node", strconv.Itoa(node), "--kill"); err != nil {
					in.hist.add(event{Ev: "fault_failed", Fault: kind, Proc: name, Detail: err.Error()})
					return
				}
				in.hist.add(event{Ev: "fault", Fault: kind, Proc: name, Detail: "SIGKILL" + what})
				fmt.Fprintf(in.cfg.Out, "chaos: %s %s SIGKILL%s\n", kind, name, what)
				downAt := time.Now()
				ctxtime.Sleep(ctx, down)
				t0 := time.Now()
				if _, err := rc.kafka(context.Background(), "start-node", strconv.Itoa(node)); err != nil {
					in.hist.add(event{Ev: "start_failed", Proc: name, Detail: err.Error()})
					fmt.Fprintf(in.cfg.Out, "chaos: %s does not come back: %v\n", name, err)
					return
				}
				in.hist.add(event{Ev: "start", Proc: name, Detail: fmt.Sprintf("back in every ISR after %.1fs", time.Since(t0).Seconds())})
				in.rec.nodeWasDown(downAt, time.Now())
				in.ended(kind, name)
				return
			}
			pid := rc.nodePid(context.Background(), node)
			if pid <= 0 || syscall.Kill(pid, syscall.SIGSTOP) != nil {
				return
			}
			in.hist.add(event{Ev: "fault", Fault: kind, Proc: name, PID: pid, Detail: fmt.Sprintf("SIGSTOP for %v", brokerPause)})
			fmt.Fprintf(in.cfg.Out, "chaos: %s %s SIGSTOP for %v\n", kind, name, brokerPause)
			downAt := time.Now()
			ctxtime.Sleep(ctx, brokerPause)
			_ = syscall.Kill(pid, syscall.SIGCONT)
			in.rec.nodeWasDown(downAt, time.Now())
			in.hist.add(event{Ev: "fault", Fault: "cont", Proc: name, PID: pid})
			in.ended(kind, name)
		}()
	case FaultPGRestart:
		if time.Since(in.lastPG) < pgGap || !in.pgRestarting.CompareAndSwap(false, true) {
			return
		}
		in.lastPG = time.Now()
		in.record(kind, nil, "pg_ctl restart -m immediate")
		in.episodes.Add(1)
		go func() {
			defer in.episodes.Done()
			defer in.pgRestarting.Store(false)
			if err := rc.restartPostgres(context.Background()); err != nil {
				in.hist.add(event{Ev: "fault_failed", Fault: kind, Detail: err.Error()})
				fmt.Fprintf(in.cfg.Out, "chaos: %v\n", err)
			}
			in.ended(kind, "postgres")
		}()
	case FaultPGTerminate:
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := terminateBackends(tctx, in.db)
		cancel()
		if err != nil {
			in.hist.add(event{Ev: "fault_failed", Fault: kind, Detail: err.Error()})
			return
		}
		in.record(kind, nil, fmt.Sprintf("%d connections", n))
		in.ended(kind, "postgres")
	case FaultNetReset:
		up, name := in.pickUpstream(true)
		n := rc.proxy.Reset(up)
		in.record(kind, nil, fmt.Sprintf("%s: %d connections", name, n))
		in.ended(kind, name)
	case FaultNetLatency, FaultNetHold, FaultNetOneWay:
		if !in.netFault.CompareAndSwap(false, true) {
			return
		}
		up, name := in.pickUpstream(kind == FaultNetLatency)
		var d time.Duration
		var undo func()
		switch kind {
		case FaultNetLatency:
			lat := 200*time.Millisecond + time.Duration(in.rng.Int64N(int64(600*time.Millisecond)))
			d = 5*time.Second + time.Duration(in.rng.Int64N(int64(5*time.Second)))
			rc.proxy.SetLatency(up, lat)
			undo = func() { rc.proxy.SetLatency(up, 0) }
			in.record(kind, nil, fmt.Sprintf("%s: +%v per frame for %v", name, lat.Round(time.Millisecond), d.Round(time.Millisecond)))
		case FaultNetHold:
			d = 15 * time.Second
			f := rc.proxy.HoldRequest(faultproxy.Keys(holdKeys...), d)
			in.record(kind, nil, fmt.Sprintf("the next Produce/OffsetCommit/TxnOffsetCommit/EndTxn/AddOffsetsToTxn held %v", d))
			undo = func() {
				if rc.proxy.Disarm(f) {
					in.hist.add(event{Ev: "fault", Fault: "hold-unmatched"})
					return
				}
				r := f.Request()
				<-f.Done()
				in.hist.add(event{Ev: "fault", Fault: "held", Detail: fmt.Sprintf("api key %d v%d to %s, client left %v", r.APIKey, r.Version, r.Upstream, f.ClientLeft())})
			}
			d += 2 * time.Second
		case FaultNetOneWay:
			d = 20 * time.Second
			release := rc.proxy.Withhold(up, d)
			undo = release
			in.record(kind, nil, fmt.Sprintf("%s: requests in, responses withheld for %v", name, d))
		}
		in.episodes.Add(1)
		go func() {
			defer in.episodes.Done()
			defer in.netFault.Store(false)
			ctxtime.Sleep(ctx, d)
			undo()
			in.ended(kind, name)
		}()
	}
}

// pickUpstream picks one broker's upstream, or (with orAll, one time in
// four) all of them ("").
func (in *injector) pickUpstream(orAll bool) (upstream, name string) {
	if orAll && in.rng.IntN(4) == 0 {
		return "", "every broker"
	}
	i := in.rng.IntN(len(in.rc.ups))
	return in.rc.ups[i], fmt.Sprintf("kafka-%d", i+1)
}

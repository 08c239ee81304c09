package system

// Test knobs for the crash harness (package chaos). They are read from the
// environment by Start, so that `ordercast run` processes started by the
// harness get them without flags; all are unset in production, where they
// change nothing.

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/processor"
)

// Environment variables read by Start.
const (
	// EnvFault arms crash points: a comma-separated list of point:probability,
	// e.g. "crash-after-effect:0.002,crash-after-txn-offsets:0.05", and
	// optionally until:UNIX-SECONDS, after which no point fires; SIGUSR1
	// disarms them too. At an armed point the process writes "ordercast
	// fault: <point> ..." to stderr and SIGKILLs itself with that
	// probability. Test-only.
	EnvFault = "ORDERCAST_FAULT"
	// EnvMemberID names this process among processes running the same
	// services (see Config.Consumers.MemberID).
	EnvMemberID = "ORDERCAST_MEMBER_ID"
	// EnvSessionTimeout sets every member's group session timeout (a Go
	// duration, e.g. "6s"; see Config.Consumers.SessionTimeout).
	EnvSessionTimeout = "ORDERCAST_SESSION_TIMEOUT"
)

// Crash points of EnvFault.
const (
	// FaultAfterEffect: a consumer handler's inbox transaction committed
	// (effect applied, or a duplicate skipped) and the runtime has not yet
	// marked the record done nor committed its offset.
	FaultAfterEffect = "crash-after-effect"
	// FaultAfterTxnProduce: fulfillment's transactional output was
	// acknowledged by the broker, the transaction is not committed.
	FaultAfterTxnProduce = "crash-after-txn-produce"
	// FaultAfterTxnOffsets: fulfillment's consumed offsets were added to
	// the transaction (TxnOffsetCommit answered), EndTxn not sent (S13).
	FaultAfterTxnOffsets = "crash-after-txn-offsets"
	// FaultAfterRelayCommit: the outbox relay's transaction committed
	// (EndTxn answered), its rows are not marked sent.
	FaultAfterRelayCommit = "crash-after-relay-commit"
	// FaultTermInTxn: fulfillment sends itself SIGTERM right after a
	// transform returned output inside an open transaction: a clean
	// shutdown that starts mid-transaction (not a crash: the process
	// drains, ends the transaction and leaves the group).
	FaultTermInTxn = "term-in-txn"
	// FaultPaymentsTransient: not a crash. Each orderCreated record is
	// picked for it with the probability (by a hash of its coordinates, so
	// the pick is the same on every attempt and member), and the payments
	// handler then fails it transiently on its first attempts: all of its
	// first hop's (to the first retry topic) and, for every other picked
	// record, the second hop's too; then it succeeds. It drives records
	// through the retry topics while the key order must hold.
	FaultPaymentsTransient = "payments-transient"
)

var faultPoints = []string{FaultAfterEffect, FaultAfterTxnProduce, FaultAfterTxnOffsets, FaultAfterRelayCommit, FaultTermInTxn, FaultPaymentsTransient}

// faults are the armed crash points; the zero value arms none.
type faults struct {
	p        map[string]float64
	until    time.Time // zero: no end
	disarmed atomic.Bool
	mu       sync.Mutex
	rng      *rand.Rand
}

// parseFaults parses EnvFault's syntax.
func parseFaults(spec string) (*faults, error) {
	f := &faults{p: map[string]float64{}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, ps, ok := strings.Cut(item, ":")
		if name == "until" {
			sec, err := strconv.ParseInt(ps, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s %q: until:%q is not Unix seconds", EnvFault, spec, ps)
			}
			f.until = time.Unix(sec, 0)
			continue
		}
		p, err := strconv.ParseFloat(ps, 64)
		known := false
		for _, k := range faultPoints {
			known = known || k == name
		}
		if !ok || err != nil || p < 0 || p > 1 || !known {
			return nil, fmt.Errorf("%s %q: %q is not point:probability with a point among %s and 0 <= probability <= 1", EnvFault, spec, item, strings.Join(faultPoints, ", "))
		}
		f.p[name] = p
	}
	if len(f.p) > 0 {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGUSR1)
		go func() {
			<-sig
			f.disarmed.Store(true)
			fmt.Fprintf(os.Stderr, "ordercast fault: disarmed by SIGUSR1 pid=%d\n", os.Getpid())
		}()
	}
	return f, nil
}

func (f *faults) armed(point string) bool { return f != nil && f.p[point] > 0 }

// hit reports, with the point's probability, whether it fires now, and
// says so on stderr (the harness counts these lines).
func (f *faults) hit(point, detail string) bool {
	if !f.armed(point) || f.disarmed.Load() || (!f.until.IsZero() && time.Now().After(f.until)) {
		return false
	}
	f.mu.Lock()
	hit := f.rng.Float64() < f.p[point]
	f.mu.Unlock()
	if hit {
		fmt.Fprintf(os.Stderr, "ordercast fault: %s %s pid=%d\n", point, detail, os.Getpid())
	}
	return hit
}

// maybeCrash SIGKILLs the process with the point's probability.
func (f *faults) maybeCrash(point, detail string) {
	if f.hit(point, detail) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the signal is on its way
	}
}

// txnHandler wraps fulfillment's transform with the term-in-txn point.
func (f *faults) txnHandler(txnID string, h processor.TxnHandler) processor.TxnHandler {
	if !f.armed(FaultTermInTxn) {
		return h
	}
	var once sync.Once
	return func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		outs, err := h(ctx, r)
		if err == nil && len(outs) > 0 && f.hit(FaultTermInTxn, fmt.Sprintf("transactional_id=%s topic=%s partition=%d offset=%d", txnID, r.Topic, r.Partition, r.Offset)) {
			once.Do(func() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) })
		}
		return outs, err
	}
}

// txnBatchHandler is txnHandler for fulfillment's batch transform: the
// term-in-txn point fires after a batch that produced outputs.
func (f *faults) txnBatchHandler(txnID string, h processor.TxnBatchHandler) processor.TxnBatchHandler {
	if !f.armed(FaultTermInTxn) {
		return h
	}
	var once sync.Once
	return func(ctx context.Context, recs []*kgo.Record) ([][]*kgo.Record, error) {
		outs, err := h(ctx, recs)
		if err != nil {
			return outs, err // no output of it is produced: the single-record wrapper's rule
		}
		for i, o := range outs {
			if len(o) > 0 && f.hit(FaultTermInTxn, fmt.Sprintf("transactional_id=%s batch=%d topic=%s partition=%d offset=%d", txnID, len(recs), recs[i].Topic, recs[i].Partition, recs[i].Offset)) {
				once.Do(func() { _ = syscall.Kill(os.Getpid(), syscall.SIGTERM) })
				break
			}
		}
		return outs, err
	}
}

// transient wraps the payments group's handler (and batch handler) with
// the payments-transient point: a picked record fails with a transient
// error on its first maxAttempts (one hop) or 2*maxAttempts (two hops)
// attempts in this process.
func (f *faults) transient(group string, maxAttempts int, h processor.Handler, b processor.BatchHandler) (processor.Handler, processor.BatchHandler) {
	if !f.armed(FaultPaymentsTransient) || group != ServicePayments {
		return h, b
	}
	if maxAttempts <= 0 {
		maxAttempts = 3 // the runtime's default
	}
	var mu sync.Mutex
	tries := map[string]int{}
	pick := func(r *kgo.Record) (string, int, bool) {
		id := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
		sum := fnv.New64a()
		sum.Write([]byte(id))
		x := sum.Sum64()
		if float64(x%1_000_000) >= f.p[FaultPaymentsTransient]*1_000_000 {
			return "", 0, false
		}
		return id, maxAttempts * int(1+(x>>32)%2), true
	}
	fails := func(r *kgo.Record, count bool) bool {
		id, n, ok := pick(r)
		if !ok {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if tries[id] >= n {
			return false
		}
		if count {
			tries[id]++
		}
		return true
	}
	h2 := func(ctx context.Context, r *kgo.Record) error {
		if fails(r, true) {
			return fmt.Errorf("%s: injected transient failure of %s/%d/%d", FaultPaymentsTransient, r.Topic, r.Partition, r.Offset)
		}
		return h(ctx, r)
	}
	var b2 processor.BatchHandler
	if b != nil {
		b2 = func(ctx context.Context, recs []*kgo.Record) error {
			for _, r := range recs {
				if fails(r, false) {
					return fmt.Errorf("%s: a record of the batch is picked; handled one at a time", FaultPaymentsTransient)
				}
			}
			return b(ctx, recs)
		}
	}
	return h2, b2
}

// handler wraps a consumer handler with the after-effect crash point.
func (f *faults) handler(group string, h processor.Handler) processor.Handler {
	if !f.armed(FaultAfterEffect) {
		return h
	}
	return func(ctx context.Context, r *kgo.Record) error {
		err := h(ctx, r)
		if err == nil {
			f.maybeCrash(FaultAfterEffect, fmt.Sprintf("group=%s topic=%s partition=%d offset=%d", group, r.Topic, r.Partition, r.Offset))
		}
		return err
	}
}

// hook is a kgo hook that crashes after the response to a request key was
// read (the broker did the work; the client has not acted on it yet).
type hook struct {
	f      *faults
	points map[int16]string // request key -> point
	detail string
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (h hook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if point, ok := h.points[key]; ok && err == nil {
		h.f.maybeCrash(point, h.detail)
	}
}

// txnHooks returns the kgo options arming fulfillment's crash points.
func (f *faults) txnHooks(detail string) []kgo.Opt {
	points := map[int16]string{}
	if f.armed(FaultAfterTxnProduce) {
		points[kmsg.Produce.Int16()] = FaultAfterTxnProduce
	}
	if f.armed(FaultAfterTxnOffsets) {
		points[kmsg.TxnOffsetCommit.Int16()] = FaultAfterTxnOffsets
	}
	if len(points) == 0 {
		return nil
	}
	return []kgo.Opt{kgo.WithHooks(hook{f: f, points: points, detail: detail})}
}

// relayHooks returns the kgo options arming the relay's crash point.
func (f *faults) relayHooks() []kgo.Opt {
	if !f.armed(FaultAfterRelayCommit) {
		return nil
	}
	return []kgo.Opt{kgo.WithHooks(hook{f: f, points: map[int16]string{kmsg.EndTxn.Int16(): FaultAfterRelayCommit}, detail: "relay=payments"})}
}

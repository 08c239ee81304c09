package load

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
)

// Shipment is one shipmentRequested record as the Watcher saw it: the order
// and when its fetch returned (the record's transaction committed before).
type Shipment struct {
	OrderID string
	At      time.Time
}

// Watcher reads shipmentRequested as a read_committed consumer (no group,
// every partition) from the last stable offsets at its start, so it sees
// each order's shipment once its fulfillment transaction is committed, and
// notes when. Its methods are safe for concurrent use.
type Watcher struct {
	cl     *kgo.Client
	serde  *schema.Serde
	cancel context.CancelFunc
	done   chan struct{}

	mu          sync.Mutex
	seen        []Shipment
	undecodable int
	pos         map[int32]int64 // next offset to read, per partition
	err         error
}

// NewWatcher starts reading shipmentRequested with a client of opts (seed
// brokers, TLS, SASL) at the topic's last stable offsets (ListOffsets with
// read_committed isolation). It fails if the topic does not exist or the
// offsets cannot be listed. Close stops it.
func NewWatcher(ctx context.Context, opts []kgo.Opt, serde *schema.Serde) (*Watcher, error) {
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer admCl.Close()
	ends, err := kadm.NewClient(admCl).ListCommittedOffsets(ctx, order.TopicShipmentRequested)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("load: last stable offsets of %s (is the system up, its topics created?): %w", order.TopicShipmentRequested, err)
	}
	if len(ends) == 0 {
		return nil, fmt.Errorf("load: topic %s not found: is the system up, its topics created?", order.TopicShipmentRequested)
	}
	start := map[int32]kgo.Offset{}
	pos := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		start[o.Partition] = kgo.NewOffset().At(o.Offset)
		pos[o.Partition] = o.Offset
	})
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{order.TopicShipmentRequested: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{cl: cl, serde: serde, cancel: cancel, done: make(chan struct{}), pos: pos}
	go w.run(rctx)
	return w, nil
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	for {
		f := w.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		at := time.Now()
		var batch []Shipment
		bad := 0
		f.EachError(func(_ string, _ int32, err error) {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
		})
		last := map[int32]int64{}
		f.EachRecord(func(r *kgo.Record) {
			last[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			var ev order.ShipmentRequested
			if _, err := w.serde.DecodeContext(ctx, r.Topic, r.Value, &ev); err != nil || ev.OrderID == "" {
				bad++
				return
			}
			batch = append(batch, Shipment{OrderID: ev.OrderID, At: at})
		})
		w.mu.Lock()
		w.seen = append(w.seen, batch...)
		w.undecodable += bad
		for p, o := range last {
			w.pos[p] = o
		}
		w.mu.Unlock()
	}
}

// Since returns the shipments seen after the first n, and the new count.
func (w *Watcher) Since(n int) ([]Shipment, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]Shipment(nil), w.seen[min(n, len(w.seen)):]...)
	return out, len(w.seen)
}

// Undecodable counts records that did not decode to a shipmentRequested
// with an order id.
func (w *Watcher) Undecodable() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.undecodable
}

// WaitCaughtUp blocks until the Watcher has read every partition up to its
// current last stable offset (what a read_committed reader can see now), or
// ctx ends (its error).
func (w *Watcher) WaitCaughtUp(ctx context.Context) error {
	ends, err := kadm.NewClient(w.cl).ListCommittedOffsets(ctx, order.TopicShipmentRequested)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("load: last stable offsets of %s: %w", order.TopicShipmentRequested, err)
	}
	for {
		behind := 0
		w.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) {
			if w.pos[o.Partition] < o.Offset {
				behind++
			}
		})
		w.mu.Unlock()
		if behind == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("load: the shipment reader is behind on %d partitions of %s: %w", behind, order.TopicShipmentRequested, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops reading and closes the client.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
	w.cl.Close()
}

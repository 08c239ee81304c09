package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// DefaultShareLagInterval is how often a QueueProcessor with metrics
// reads its share group's backlog when ShareLagInterval is not given.
const DefaultShareLagInterval = 10 * time.Second

// minShareLagInterval is the shortest ShareLagInterval: every refresh is
// two or three requests to the brokers from every processor of the group.
const minShareLagInterval = 100 * time.Millisecond

// ShareLagInterval sets how often a QueueProcessor given WithMetrics reads
// its share group's backlog into the share_lag and share_lag_total gauges
// (NewQueue only; New refuses it; without WithMetrics nothing is read).
// Default 10 s (DefaultShareLagInterval); d must be at least 100 ms:
// NewQueue returns an error for a shorter one.
//
// The backlog of a partition is the broker's share lag where it reports
// one (KIP-1226, DescribeShareGroupOffsets v1, Kafka 4.2+: the records from
// the share-partition start offset on not yet acknowledged, nor archived),
// else the partition's last stable offset minus the share-partition start
// offset (KIP-932), which counts the acknowledged records past the start
// offset too; for a partition the group has no share state of yet, the
// records the group would deliver from the start (log start to last stable
// offset), or 0 when the group starts at the end (share.auto.offset.reset
// latest). Each refresh sends one DescribeShareGroupOffsets request to the
// group's coordinator and a ListOffsets to each partition leader (two for
// partitions without share state); it runs while Run does, first once Run
// has read the group's configs.
func ShareLagInterval(d time.Duration) Opt {
	return opt(func(c *cfg) { c.shareLagEvery, c.shareLagSet = d, true })
}

// validateShareLag checks ShareLagInterval.
func (c *cfg) validateShareLag() error {
	switch {
	case c.shareLagSet && !c.queue:
		return fmt.Errorf("ShareLagInterval: %v: only NewQueue takes it (New's members export lag per partition they hold)", c.shareLagEvery)
	case c.shareLagSet && c.shareLagEvery < minShareLagInterval:
		return fmt.Errorf("ShareLagInterval: %v, want >= %v (default %v)", c.shareLagEvery, minShareLagInterval, DefaultShareLagInterval)
	}
	return nil
}

// reportShareLag refreshes the group's share_lag gauges every
// ShareLagInterval until stop is done, then removes them.
func (q *QueueProcessor) reportShareLag(stop context.Context) {
	every := q.cfg.shareLagEvery
	if !q.cfg.shareLagSet {
		every = DefaultShareLagInterval
	}
	adm := kadm.NewClient(q.sessions[0].cl)
	defer q.cfg.metrics.dropShareLag(q.cfg.group)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(stop, max(every, 5*time.Second))
		lags, err := shareBacklog(ctx, adm, q.cfg.group, q.cfg.topics, q.startLatest)
		cancel()
		switch {
		case stop.Err() != nil:
			return
		case err != nil:
			q.cfg.logger.Warn("reading the share group's backlog: share_lag not reported until the next refresh", "error", err)
			q.cfg.metrics.dropShareLag(q.cfg.group)
		default:
			q.cfg.metrics.setShareLag(q.cfg.group, lags)
		}
		select {
		case <-stop.Done():
			return
		case <-t.C:
		}
	}
}

// shareBacklog returns, for each partition of topics, the records group
// has not acknowledged yet (see ShareLagInterval): topic -> partition ->
// records. startLatest says the group starts a partition without share
// state at its end. Any error of a request or a partition fails it all.
func shareBacklog(ctx context.Context, adm *kadm.Client, group string, topics []string, startLatest bool) (map[string]map[int32]int64, error) {
	described, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("describe share group offsets: %w", err)
	}
	d := described[group]
	if d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) { // not found: no share state yet
		return nil, fmt.Errorf("describe share group offsets: %w", d.Err)
	}
	// The group reads committed: its partitions end at their last stable offset.
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("last stable offsets: %w", err)
	}
	out := map[string]map[int32]int64{}
	var fresh []kadm.ListedOffset // partitions without share state
	for _, e := range ends.Offsets().Sorted() {
		if out[e.Topic] == nil {
			out[e.Topic] = map[int32]int64{}
		}
		o, ok := d.Offsets.Lookup(e.Topic, e.Partition)
		switch {
		case ok && o.Err != nil:
			return nil, fmt.Errorf("share-partition offsets of %s[%d]: %w", e.Topic, e.Partition, o.Err)
		case ok && o.Lag >= 0:
			out[e.Topic][e.Partition] = o.Lag
		case ok && o.StartOffset >= 0:
			out[e.Topic][e.Partition] = max(0, e.At-o.StartOffset)
		case startLatest:
			out[e.Topic][e.Partition] = 0
		default:
			fresh = append(fresh, kadm.ListedOffset{Topic: e.Topic, Partition: e.Partition, Offset: e.At})
		}
	}
	if len(fresh) == 0 {
		return out, nil
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("log start offsets: %w", err)
	}
	for _, e := range fresh {
		s, ok := starts.Lookup(e.Topic, e.Partition)
		if !ok {
			return nil, fmt.Errorf("log start offset of %s[%d]: missing from the broker's answer", e.Topic, e.Partition)
		}
		out[e.Topic][e.Partition] = max(0, e.Offset-s.Offset)
	}
	return out, nil
}

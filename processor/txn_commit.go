package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The exactly-once mode's committed offsets: settling where to resume after a
// transaction reported not committed, repairing a stale TxnOffsetCommit that
// landed late, and reading the group's offsets with RequireStable.

// settle runs after End returned committed=false with no error, and moves the
// session's consume positions to the offsets the broker holds.
//
// Which End results are certain (franz-go v1.22.3, kgo/txn.go):
//   - committed=true, err=nil: the EndTxn(commit) was answered without error
//     (a retry of a commit whose first response was lost is answered as a
//     success too: Kafka and kfake replay it). The offsets franz-go now
//     caches are the broker's.
//   - err != nil: uncertain; Run replaces the session (the new one's
//     InitProducerID settles the transaction, its OffsetFetch waits for it).
//   - committed=false, err=nil: NOT certain. It is a clean abort (a revoke
//     or loss during the transaction, an abortable TxnOffsetCommit error, an
//     abort we asked for), or an EndTxn(commit) whose outcome franz-go could
//     not confirm: a lost response whose retry was answered with
//     UNKNOWN_SERVER_ERROR or TRANSACTION_ABORTABLE (or OPERATION_NOT_ATTEMPTED)
//     is retried as an abort, which a broker that already committed ignores.
//     franz-go then rewinds to the offsets it cached before the
//     transaction, and re-transforming from there writes the committed
//     transaction's outputs twice (S16). End's result does not say which of
//     the two happened.
//
// So settle treats every not-committed End alike, inside the session:
//
//  1. Settle the transaction's fate. After an unconfirmed EndTxn franz-go
//     marks the producer ID for reloading (kgo.EndTransaction's
//     failProducerID); ProducerID performs that reload now: InitProducerID
//     at the old epoch bumps it, which completes a prepared commit or aborts
//     what was ongoing, and fences any EndTxn or TxnOffsetCommit of the old
//     epoch still in the network. After a clean abort nothing is pending and
//     ProducerID returns the cached ID. (Begin would reload too, but only
//     after the next poll, with our positions already chosen.)
//  2. Read the group's committed offsets with RequireStable (KIP-447): the
//     broker answers UNSTABLE_OFFSET_COMMIT while any transactional offsets
//     of the group are pending, so a stable answer includes this
//     transaction's offsets if and only if it committed.
//  3. Move forward only: a partition the member consumes whose broker offset
//     is past the one franz-go rewound to is set to the broker's (SetOffsets,
//     which also makes the next transaction commit that offset, so
//     franz-go's cache is corrected by the next commit). Moving forward to an
//     offset the group committed is always safe: a transaction commits its
//     inputs' offsets and outputs atomically, so every input below it has its
//     output. Moving back is never done: an offset below the cached one
//     cannot come from this transaction, and rewinding to it would re-write
//     committed outputs.
//
// Why not replace the session instead (close it, start one with the same
// transactional ID: also safe)? Leaving and rejoining is a rebalance for
// every member of the group; most not-committed Ends are aborts caused by a
// rebalance, and answering each with another rebalance would chain them
// (each member's open transaction aborts on the next one). Settling in the
// session costs an OffsetFetch per abort and no rebalance. A settle that
// fails (a fenced producer, the offsets never stabilising within the
// transaction timeout) falls back to replacing the session.
//
// It returns whether the transaction's offsets landed (every partition of
// last is at or past its offset+1 on the broker) and the partitions moved,
// with their new offsets.
func (t *TxnProcessor) settle(sess *kgo.GroupTransactSession, w *txnWork, sent map[tp]commitPoint) (landed bool, moved map[tp]int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.txnTimeout+30*time.Second)
	defer cancel()
	w.drop()
	cl := sess.Client()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return false, nil, fmt.Errorf("reload producer id: %w", err)
	}
	held, err := t.stableCommits(ctx, cl)
	if err != nil {
		return false, nil, err
	}
	landed = len(sent) > 0
	for k, cp := range sent {
		if h, ok := held[k]; !ok || h.offset < cp.offset || (h.offset == cp.offset && h.meta != cp.meta) {
			landed = false
		}
	}
	set := map[string]map[int32]kgo.EpochOffset{}
	var owned []tp
	t.mu.Lock()
	for topic, ps := range t.owned {
		for p := range ps {
			owned = append(owned, tp{topic, p})
		}
	}
	t.mu.Unlock()
	w.mu.Lock()
	for _, k := range owned {
		off := int64(-1)
		if h, ok := held[k]; ok {
			off = h.offset
			if moved == nil {
				moved = map[tp]int64{}
			}
			moved[k] = off
		} else if o, ok := w.origin[k]; ok {
			off = o // never committed: back to where this session started it
		}
		if off < 0 {
			continue
		}
		if set[k.topic] == nil {
			set[k.topic] = map[int32]kgo.EpochOffset{}
		}
		set[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
	}
	w.mu.Unlock()
	// Back or forward: franz-go rewound to the offsets it cached, which
	// are neither what the broker holds after an unconfirmed commit nor
	// where a partition's records were dropped.
	cl.SetOffsets(set)
	w.initParts(owned, held)
	if err := t.repairLateCommits(sess, w, held); err != nil {
		return landed, moved, fmt.Errorf("repair committed offsets: %w", err)
	}
	return landed, moved, nil
}

// lateCommitHook notes a TxnOffsetCommit that failed on the wire (a write
// error, or no response within the request timeout): the broker may still
// receive and apply it later.
type lateCommitHook struct{ t *TxnProcessor }

func (h lateCommitHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key == int16(kmsg.TxnOffsetCommit) && e2e.Err() != nil {
		h.t.lateRisk.Store(time.Now().UnixNano())
	}
}

// lateRiskWindow is how long after a TxnOffsetCommit failed on the wire the
// runtime reads the group's offsets back after each commit. A copy held in
// the network longer than this is not defended against; twice the
// transaction timeout is far above a broker's request queue and the usual
// network hold (the client's own request timeout, 10s plus the request's).
func (t *TxnProcessor) lateRiskWindow() time.Duration { return max(2*t.cfg.txnTimeout, time.Minute) }

func (t *TxnProcessor) atLateRisk() bool {
	at := t.lateRisk.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < t.lateRiskWindow()
}

// repairLateCommits re-commits, in a transaction of its own, the offsets of
// partitions this member consumes whose offset on the broker is below the
// one the member committed (franz-go's cache, updated only by a commit
// confirmed by EndTxn). held is the broker's offsets if the caller just read
// them; nil reads them (RequireStable).
//
// Why a stale transactional commit can land (S15, exactly-once half): a
// TxnOffsetCommit the client gave up on and re-sent can reach the broker
// later. Under KIP-890 part 2 (Kafka 4.x with transaction.version 2, kfake)
// every EndTxn bumps the producer epoch, so a copy from an ended transaction
// is refused (PRODUCER_FENCED). Below it (transaction.version 1, Kafka
// before 4.0) the epoch is the same for every transaction: a copy applied
// inside a later transaction, after that transaction's own TxnOffsetCommit,
// replaces its pending offsets and is committed with it; the group's offset
// ends below what the member completed, and nothing else commits again
// until new input arrives. Outside a transaction the broker refuses it
// (INVALID_TXN_STATE). A late copy can therefore only take effect with a
// commit of ours, so reading the offsets back after each commit, for a
// while after a TxnOffsetCommit failed on the wire (lateRiskWindow), finds
// every regression it causes; the repair needs no new input. The cost when
// nothing failed on the wire is nil.
func (t *TxnProcessor) repairLateCommits(sess *kgo.GroupTransactSession, w *txnWork, held map[tp]commitPoint) error {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.txnTimeout+30*time.Second)
	defer cancel()
	cl := sess.Client()
	for round := 0; ; round++ {
		if held == nil {
			var err error
			if held, err = t.stableCommits(ctx, cl); err != nil {
				return err
			}
		}
		want := map[tp]commitPoint{}
		for k, cp := range w.sentCommits() {
			b, ok := held[k]
			if !t.holds(k) || (ok && (b.offset > cp.offset || b == cp)) {
				continue
			}
			want[k] = cp
			t.cfg.logger.Warn("the group's committed offset is behind this member's last commit (a stale commit landed late); re-committing it",
				"topic", k.topic, "partition", k.partition, "broker_offset", b.offset, "committed", cp.offset)
		}
		if len(want) == 0 {
			return nil
		}
		if round == 3 {
			return fmt.Errorf("offsets still behind after %d re-commits: %v", round, want)
		}
		if err := t.recommit(ctx, sess, w, want); err != nil {
			return err
		}
		held = nil // read back what the repair did
	}
}

// recommit commits want (topic -> partition -> offset) in a transaction
// without records. franz-go's End sends only the offsets that moved since
// its last commit, so the repaired partitions are added to the
// TxnOffsetCommit it builds (kgo.PreTxnCommitFnContext).
func (t *TxnProcessor) recommit(ctx context.Context, sess *kgo.GroupTransactSession, w *txnWork, want map[tp]commitPoint) error {
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	committed, err := sess.End(t.txnCommitCtx(ctx, w.commitsFn(want)), kgo.TryCommit)
	if err != nil {
		return fmt.Errorf("end: %w", err)
	}
	if !committed {
		// A rebalance aborted it; the caller reads back and retries,
		// and partitions no longer ours are dropped then.
		t.cfg.logger.Info("re-commit of offsets aborted")
	}
	return nil
}

// commitsFn returns the TxnOffsetCommit fn (kgo.PreTxnCommitFnContext) that
// commits exactly commits, with their metadata: franz-go builds the
// request from its consume positions (every record polled, completed or
// not), so its partitions are replaced by ours; a partition the member no
// longer holds is left out. Topic IDs (TxnOffsetCommit v6, KIP-1319) are
// franz-go's or the fetches'; a topic without one pins the request to v5,
// by name (franz-go does that itself).
func (w *txnWork) commitsFn(commits map[tp]commitPoint) func(*kmsg.TxnOffsetCommitRequest) error {
	return func(req *kmsg.TxnOffsetCommitRequest) error {
		ids := map[string][16]byte{}
		w.mu.Lock()
		for topic, id := range w.topicIDs {
			ids[topic] = id
		}
		w.mu.Unlock()
		for _, rt := range req.Topics {
			if rt.TopicID != ([16]byte{}) {
				ids[rt.Topic] = rt.TopicID
			}
		}
		keys := make([]tp, 0, len(commits))
		for k := range commits {
			if w.t.holds(k) {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(a, b tp) int {
			if a.topic != b.topic {
				return strings.Compare(a.topic, b.topic)
			}
			return int(a.partition - b.partition)
		})
		req.Topics = req.Topics[:0]
		for _, k := range keys {
			if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != k.topic {
				rt := kmsg.NewTxnOffsetCommitRequestTopic()
				rt.Topic, rt.TopicID = k.topic, ids[k.topic]
				req.Topics = append(req.Topics, rt)
			}
			rt := &req.Topics[len(req.Topics)-1]
			cp := commits[k]
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = k.partition, cp.offset, -1
			meta := cp.meta
			rp.Metadata = &meta
			rt.Partitions = append(rt.Partitions, rp)
		}
		return nil
	}
}

// txnCommitCtx returns ctx for GroupTransactSession.End: the
// TxnOffsetCommit franz-go builds goes through fn (nil: none), then, when
// the member knows the group's start time (StartOffset(Latest)), every
// partition's metadata is set to carry it ("oc1:;t=<ms>", offsetmap.go;
// franz-go's default is the member ID), so that every member and every
// restart finds it. fn runs under franz-go's transaction lock: it must not
// block.
func (t *TxnProcessor) txnCommitCtx(ctx context.Context, fn func(*kmsg.TxnOffsetCommitRequest) error) context.Context {
	if fn == nil && t.groupStart == nil {
		return ctx
	}
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		if fn != nil {
			if err := fn(req); err != nil {
				return err
			}
		}
		if meta := withGroupStart("", t.groupStart.get()); meta != "" {
			for i := range req.Topics {
				for j := range req.Topics[i].Partitions {
					rp := &req.Topics[i].Partitions[j]
					if rp.Metadata == nil || !strings.HasPrefix(*rp.Metadata, offsetMapPrefix) {
						rp.Metadata = &meta // not ours (fn set none): the start time alone
					}
				}
			}
		}
		return nil
	})
}

// stableCommits returns the group's committed offsets and metadata for its topics, read
// with RequireStable; it retries while they are unstable (a transaction of
// the group is pending) until ctx ends.
func (t *TxnProcessor) stableCommits(ctx context.Context, cl *kgo.Client) (map[tp]commitPoint, error) {
	adm := kadm.NewClient(cl)
	for attempt := 1; ; attempt++ {
		resp, err := adm.FetchOffsets(kadm.RequireStable(ctx), t.cfg.group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			// The coordinator holds no state of the group (it never
			// formed, or it was deleted): nothing is committed. Kafka
			// answers such an OffsetFetch with no offsets, newer
			// coordinators (and kfake) with GROUP_ID_NOT_FOUND.
			return map[tp]commitPoint{}, nil
		}
		var held map[tp]commitPoint
		if err == nil {
			held, err = t.ownStable(resp)
		}
		if err == nil {
			return held, nil
		}
		if !errors.Is(err, kerr.UnstableOffsetCommit) && !kerr.IsRetriable(err) {
			return nil, fmt.Errorf("fetch committed offsets: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("fetch committed offsets: still unstable after %d attempts: %w", attempt, err)
		case <-time.After(backoff(attempt, 10*time.Millisecond, 500*time.Millisecond)):
		}
	}
}

// ownStable returns the committed offsets of the group's input topics in
// resp, and the first error among the partitions this member holds. An error
// on another member's partition (UNSTABLE_OFFSET_COMMIT while that member's
// transaction is open: Kafka answers it per partition) is not waited for:
// with several members, some transaction of the group is nearly always open.
func (t *TxnProcessor) ownStable(resp kadm.OffsetResponses) (map[tp]commitPoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	held := map[tp]commitPoint{}
	var first error
	resp.Each(func(o kadm.OffsetResponse) {
		if !slices.Contains(t.cfg.topics, o.Topic) {
			return
		}
		if o.Err != nil {
			if t.owned[o.Topic][o.Partition] && first == nil {
				first = fmt.Errorf("%s[%d]: %w", o.Topic, o.Partition, o.Err)
			}
			return
		}
		if o.At >= 0 {
			held[tp{o.Topic, o.Partition}] = commitPoint{o.At, o.Metadata}
		}
	})
	return held, first
}

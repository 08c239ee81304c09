package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Key blocking (BlockKeys): while a key has a record waiting in one of the
// group's retry topics (or, with KeyBlockDeadLetters, in its DLQ), the
// group's later records of that key wait at their source partition behind
// it, so retry topics no longer reorder a key.
//
// Which keys are blocked lives in a compacted topic of the group's
// (BlockedKeysTopic, "<group>.blocked-keys"), keyed by the record key. Every
// member reads all of it into a table; a member writes to it:
//
//   - "blocked" {id, at, since} before it writes a record to a retry topic or
//     (KeyBlockDeadLetters) to the DLQ: id names the blocking record by its
//     original coordinates ("topic/partition/offset" as first consumed), at
//     is where it now waits;
//   - "released" {id} once the blocking record succeeded, or was
//     dead-lettered (KeyBlockRetries), or a replayed copy of it succeeded
//     (KeyBlockDeadLetters), or an operator purged it. A release names the
//     record it releases and applies only while that record still blocks
//     the key, so a late duplicate cannot release a newer block.
//
// The "blocked" entry is written before the retry or DLQ record, and the
// source offset is completed only after both: a crash in between leaves the
// record uncommitted at its source, where its next owner finds it is the
// key's blocker and handles it again, so a key is never blocked by a record
// that is nowhere. A release is written before the record that caused it
// completes, for the same reason.
//
// The later records of a blocked key are held in memory in their lane, not
// committed (the completed-offsets map lets the partition's other keys
// commit past them), and parked: out of the MaxInFlight room of the other
// keys, in the parked room of the same size, which pauses only the
// partitions holding parked records when full. A new owner of a partition
// reads the table up to its end before it handles any record of the
// partition (onAssigned), so the hold survives rebalances and restarts.

// KeyBlock says which failed records hold back the later records of their
// key (BlockKeys).
type KeyBlock uint8

const (
	// KeyBlockOff: records of a key are not held (the default). A record in
	// a retry topic is overtaken by the later records of its key.
	KeyBlockOff KeyBlock = iota
	// KeyBlockRetries: a key is held while one of its records waits in a
	// retry topic; the key is released when that record succeeds or is
	// dead-lettered.
	KeyBlockRetries
	// KeyBlockDeadLetters: as KeyBlockRetries, and a dead-lettered record
	// keeps holding its key until a replayed copy of it succeeds or it is
	// purged (a replayed record of a key held at the DLQ is handled ahead
	// of the records held behind it).
	KeyBlockDeadLetters
)

func (b KeyBlock) String() string {
	switch b {
	case KeyBlockOff:
		return "off"
	case KeyBlockRetries:
		return "retries"
	case KeyBlockDeadLetters:
		return "dead-letters"
	}
	return "KeyBlock(" + strconv.Itoa(int(b)) + ")"
}

// ParseKeyBlock parses "off", "retries" or "dead-letters" (KeyBlock.String).
func ParseKeyBlock(s string) (KeyBlock, error) {
	for _, b := range []KeyBlock{KeyBlockOff, KeyBlockRetries, KeyBlockDeadLetters} {
		if s == b.String() {
			return b, nil
		}
	}
	return 0, fmt.Errorf("processor: key blocking %q: want off, retries or dead-letters", s)
}

// DefaultMaxBlockedKeys is the default of MaxBlockedKeys.
const DefaultMaxBlockedKeys = 10000

// BlockedKeysTopicName returns the default blocked-keys topic of a group:
// "<group>.blocked-keys".
func BlockedKeysTopicName(group string) string { return group + ".blocked-keys" }

// BlockedKey is one entry of a group's blocked-keys table: Key waits behind
// the record ID (its original "topic/partition/offset"), which waits in At
// (a retry topic or the DLQ) since Since.
type BlockedKey struct {
	Key   []byte
	ID    string
	At    string
	Since time.Time
}

// blockValue is the JSON value of a blocked-keys record.
type blockValue struct {
	State string `json:"state"` // "blocked" or "released"
	ID    string `json:"id"`
	At    string `json:"at,omitempty"`
	Since int64  `json:"since,omitempty"` // Unix ms
}

const (
	stateBlocked  = "blocked"
	stateReleased = "released"
)

// keyBlocks is a member's copy of the group's blocked-keys table. p.mu
// guards it.
type keyBlocks struct {
	mode    KeyBlock
	topic   string
	max     int
	entries map[string]*BlockedKey
	// pending: the offset of this member's latest write of a key not yet
	// read back; the reader skips older records of that key, which the
	// write superseded.
	pending map[string]int64
	// pos: the next offset the reader will read, per partition.
	pos map[int32]int64
	// held: the lanes holding records behind a blocked key.
	held map[*lane]struct{}
	cl   *kgo.Client // the reader (Run)
	// readErr is the reader's latest fetch error, nil after a good fetch.
	readErr error
	full    int64 // blocks refused for lack of room, for the metrics
}

func newKeyBlocks(c *cfg) *keyBlocks {
	if c.keyBlock == KeyBlockOff {
		return nil
	}
	return &keyBlocks{mode: c.keyBlock, topic: c.blockedTopic, max: c.maxBlockedKeys,
		entries: make(map[string]*BlockedKey), pending: make(map[string]int64),
		pos: make(map[int32]int64), held: make(map[*lane]struct{})}
}

// recordID names r as first consumed: "topic/partition/offset".
func recordID(view *kgo.Record) string {
	return view.Topic + "/" + strconv.Itoa(int(view.Partition)) + "/" + strconv.FormatInt(view.Offset, 10)
}

// replayedRecord reports whether r carries the replay mark.
func (c *cfg) replayedRecord(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == c.hdr.replayed {
			return true
		}
	}
	return false
}

// blockerLocked returns the entry of it's key when it is the record that
// blocks its key (by id, or a replayed copy of a record held at the DLQ),
// nil otherwise. p.mu held.
func (p *Processor) blockerLocked(it *item) *BlockedKey {
	kb := p.kb
	if kb == nil || it.rec.Key == nil || len(kb.entries) == 0 {
		return nil
	}
	e := kb.entries[string(it.rec.Key)]
	if e == nil {
		return nil
	}
	if e.ID == recordID(it.view) || (e.At == p.cfg.dlqTopic && p.cfg.replayedRecord(it.rec)) {
		return e
	}
	return nil
}

// mustHoldLocked reports whether it, admitted from a source partition, is a
// later record of a blocked key. p.mu held.
func (p *Processor) mustHoldLocked(ps *partState, it *item) bool {
	kb := p.kb
	if kb == nil || ps.retry || it.rec.Key == nil || len(kb.entries) == 0 {
		return false
	}
	if kb.entries[string(it.rec.Key)] == nil {
		return false
	}
	return p.blockerLocked(it) == nil
}

// holdLaneLocked keeps lane l's records behind its blocked key: its lane
// stays active but in no ready queue until releaseKeyLocked. p.mu held.
func (p *Processor) holdLaneLocked(l *lane) {
	l.keyHeld = true
	p.setFailingLocked(l, true)
	p.kb.held[l] = struct{}{}
}

// holdForwardedLocked holds lane l behind its key once its head was
// forwarded to a retry topic or the DLQ and completed, and reports whether
// it did. The forward ran without p.mu, so the table may have moved on
// meanwhile: the record's copy in the retry topic may have succeeded and
// released the key already (the release found no lane to let run), or the
// record the key now waits for (a replayed copy of the dead-lettered one)
// may have been admitted while l was running, so queued behind the records
// the hold is for (admitLocked puts it first only in a held lane). Holding l
// then would hold it for good: instead l runs on, with that record moved to
// its front. p.mu held.
func (p *Processor) holdForwardedLocked(l *lane) bool {
	if len(l.queue) == 0 || p.kb.entries[string(l.queue[0].rec.Key)] == nil {
		return false // released already
	}
	for i, it := range l.queue {
		if p.blockerLocked(it) != nil {
			copy(l.queue[1:i+1], l.queue[:i])
			l.queue[0] = it
			return false
		}
	}
	p.holdLaneLocked(l)
	return true
}

// unholdLaneLocked lets lane l run again. p.mu held.
func (p *Processor) unholdLaneLocked(l *lane) {
	l.keyHeld = false
	delete(p.kb.held, l)
	if l.part.state == partActive && !p.stopping && len(l.queue) > 0 && !l.running && !l.waiting {
		p.pushReady(l)
	}
}

// keyLane is the lane key of record key k in OrderKey (as laneFor).
func (p *Processor) keyLane(k []byte) laneKey {
	lk := laneKey(maphash.Bytes(p.laneSeed, k))
	if lk == nullLane {
		lk = 1
	}
	return lk
}

// releaseKeyLocked drops key's entry when it is still blocked by id and
// lets the lanes holding its records run. p.mu held.
func (p *Processor) releaseKeyLocked(key []byte, id string) {
	e := p.kb.entries[string(key)]
	if e == nil || e.ID != id {
		return
	}
	delete(p.kb.entries, string(key))
	lk := p.keyLane(key)
	for _, ps := range p.parts {
		if ps.retry || ps.state != partActive {
			continue
		}
		if l := ps.lanes.get(lk); l != nil && l.keyHeld {
			p.unholdLaneLocked(l)
		}
	}
}

// applyLocked applies one blocked-keys record at offset off (off < 0: this
// member's own write, not yet read back). p.mu held.
func (p *Processor) applyBlockLocked(key []byte, v *blockValue, off int64, own bool) {
	kb := p.kb
	k := string(key)
	if own {
		kb.pending[k] = off
	} else if w, ok := kb.pending[k]; ok {
		if off < w {
			return // superseded by this member's own later write
		}
		delete(kb.pending, k)
	}
	switch v.State {
	case stateBlocked:
		kb.entries[k] = &BlockedKey{Key: bytes.Clone(key), ID: v.ID, At: v.At, Since: time.UnixMilli(v.Since)}
	case stateReleased:
		p.releaseKeyLocked(key, v.ID)
	}
}

// blockPlan is what a forward of a failed record does to the table: write
// block before the record, release after it.
type blockPlan struct {
	block   *blockValue
	release string // the id to release after the write
	hold    bool   // hold the lane's later records once written (a source record)
}

// planForwardLocked decides what forwarding it to target does to its key's
// entry. p.mu held.
func (p *Processor) planForwardLocked(ps *partState, it *item, target string) blockPlan {
	kb := p.kb
	if kb == nil || it.rec.Key == nil {
		return blockPlan{}
	}
	toDLQ := p.isDLQ(target)
	e := p.blockerLocked(it)
	if e == nil && kb.entries[string(it.rec.Key)] != nil {
		return blockPlan{} // a late copy of a record of a key blocked by another: it does not take the block over
	}
	if toDLQ && kb.mode == KeyBlockRetries {
		if e != nil {
			return blockPlan{release: e.ID}
		}
		return blockPlan{}
	}
	// The block names the record as the retry topic or DLQ record will
	// (its original coordinates, forwardHeaders): a replayed copy of a
	// record held at the DLQ takes the block over under its own
	// coordinates, keeping its age.
	since := time.Now().UnixMilli()
	id := recordID(it.view)
	if e != nil {
		since = e.Since.UnixMilli()
	}
	return blockPlan{block: &blockValue{State: stateBlocked, ID: id, At: target, Since: since}, hold: !ps.retry}
}

// roomForBlockLocked reports whether forwarding it to target may go ahead:
// it blocks no key there (KeyBlockRetries and the DLQ), its key is blocked
// already, or the table has room. p.mu held.
func (p *Processor) roomForBlockLocked(it *item, target string) bool {
	kb := p.kb
	if kb == nil || it.rec.Key == nil || len(kb.entries) < kb.max || kb.entries[string(it.rec.Key)] != nil ||
		(p.isDLQ(target) && kb.mode == KeyBlockRetries) {
		return true
	}
	kb.full++
	return false
}

// writeBlock writes v for key to the blocked-keys table and applies it to
// this member's copy. It retries a failed write with the backoff until ctx
// is done (a revoke or shutdown): the caller then leaves its record
// uncompleted, for its next owner to redo.
func (p *Processor) writeBlock(ctx context.Context, key []byte, v *blockValue) error {
	val, _ := json.Marshal(v)
	for try := 1; ; try++ {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := p.prod.ProduceSync(wctx, &kgo.Record{Topic: p.kb.topic, Key: key, Value: val}).First()
		cancel()
		if err == nil {
			p.mu.Lock()
			p.applyBlockLocked(key, v, r.Offset, true)
			p.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.cfg.logger.Error("writing the blocked-keys table failed; retrying", "topic", p.kb.topic, "state", v.State, "id", v.ID, "error", err)
		t := time.NewTimer(backoff(try, p.cfg.backoffMin, p.cfg.backoffMax))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// startKeyBlocks checks (or with CreateTopics creates: compacted, one
// partition) the blocked-keys topic and starts the member's reader of it.
func (p *Processor) startKeyBlocks(ctx context.Context) error {
	kb := p.kb
	if kb == nil {
		return nil
	}
	adm := kadm.NewClient(p.cl)
	td, err := adm.ListTopics(ctx, kb.topic)
	if err != nil {
		return fmt.Errorf("processor: checking the blocked-keys topic %s: %w", kb.topic, err)
	}
	if d, ok := td[kb.topic]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		if !p.cfg.createTopics {
			return &MissingTopicError{Topics: []string{kb.topic}, Partitions: 1, Compact: true}
		}
		cleanup := "compact"
		resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &cleanup}, kb.topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) { // another member may have created it first
			return fmt.Errorf("processor: creating the blocked-keys topic %s: %w", kb.topic, err)
		}
	} else if d.Err != nil {
		return fmt.Errorf("processor: checking the blocked-keys topic %s: %w", kb.topic, d.Err)
	}
	opts := append([]kgo.Opt{}, p.cfg.clientOpts...)
	opts = append(opts, kgo.SeedBrokers(p.cfg.brokers...), kgo.ClientID(p.cfg.clientID+"-keys"),
		kgo.ConsumeTopics(kb.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("processor: blocked-keys reader: %w", err)
	}
	kb.cl = cl
	go p.readKeyBlocks(cl)
	return nil
}

// readKeyBlocks applies the blocked-keys topic to the member's table until
// its client is closed.
func (p *Processor) readKeyBlocks(cl *kgo.Client) {
	for {
		fs := cl.PollFetches(p.baseCtx)
		if fs.IsClientClosed() || p.baseCtx.Err() != nil {
			return
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		p.mu.Lock()
		p.kb.readErr = ferr
		fs.EachRecord(func(r *kgo.Record) {
			var v blockValue
			if r.Key != nil && json.Unmarshal(r.Value, &v) == nil {
				p.applyBlockLocked(r.Key, &v, r.Offset, false)
			}
			p.kb.pos[r.Partition] = r.Offset + 1
		})
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// syncKeyBlocks waits until the member's table has read the blocked-keys
// topic up to its end as of now, so that the records of partitions just
// assigned are held as the previous owner held them. It gives up after
// timeout, logging: the partitions are then handled with what was read.
func (p *Processor) syncKeyBlocks(timeout time.Duration) {
	kb := p.kb
	if kb == nil || kb.cl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(p.baseCtx, timeout)
	defer cancel()
	ends, err := kadm.NewClient(kb.cl).ListEndOffsets(ctx, kb.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		p.cfg.logger.Error("reading the end of the blocked-keys topic failed; the partitions just assigned are handled with the blocked keys read so far", "topic", kb.topic, "error", err)
		return
	}
	stop := context.AfterFunc(ctx, func() { p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() })
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		behind := false
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > kb.pos[o.Partition] {
				behind = true
			}
		})
		if !behind {
			return
		}
		if ctx.Err() != nil {
			p.cfg.logger.Error("the blocked-keys table did not catch up in time; the partitions just assigned are handled with the blocked keys read so far", "topic", kb.topic, "timeout", timeout)
			return
		}
		p.cond.Wait()
	}
}

// BlockedKeys returns the member's copy of the group's blocked-keys table,
// sorted by key. Safe for concurrent use; nil without BlockKeys.
func (p *Processor) BlockedKeys() []BlockedKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kb == nil {
		return nil
	}
	out := make([]BlockedKey, 0, len(p.kb.entries))
	for _, e := range p.kb.entries {
		out = append(out, *e)
	}
	sortBlocked(out)
	return out
}

func sortBlocked(out []BlockedKey) {
	slices.SortFunc(out, func(a, b BlockedKey) int { return bytes.Compare(a.Key, b.Key) })
}

// keyBlockStats are the figures of the key-block metrics: the keys blocked
// (the group's, as this member reads them), the records this member holds
// behind them, and the age of the oldest block.
func (p *Processor) keyBlockStats(now time.Time) (keys, held int, oldest time.Duration, full int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kb == nil {
		return 0, 0, 0, 0
	}
	for _, e := range p.kb.entries {
		if d := now.Sub(e.Since); d > oldest {
			oldest = d
		}
	}
	for l := range p.kb.held {
		held += len(l.queue)
	}
	return len(p.kb.entries), held, oldest, p.kb.full
}

// ReadBlockedKeys reads a group's blocked-keys table (topic, see
// BlockedKeysTopicName) to its end with a client of its own made with opts
// (the seed brokers and any TLS or SASL options; no consumer or group
// options), and returns the keys blocked now, sorted by key: none, and no
// error, when the topic does not exist (a group without BlockKeys). It
// blocks until the end is read or ctx is done.
func ReadBlockedKeys(ctx context.Context, topic string, opts ...kgo.Opt) ([]BlockedKey, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("processor: reading %s: %w", topic, err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("processor: reading the end of %s: %w", topic, err)
	}
	starts := map[string]map[int32]kgo.Offset{topic: {}}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			starts[topic][o.Partition] = kgo.NewOffset().AtStart()
			remaining++
		}
	})
	entries := map[string]*BlockedKey{}
	if remaining > 0 {
		rd := cl
		rd.AddConsumePartitions(starts)
		done := map[int32]bool{}
		for len(done) < remaining {
			fs := rd.PollFetches(ctx)
			if ctx.Err() != nil {
				return nil, fmt.Errorf("processor: reading %s: %w", topic, ctx.Err())
			}
			var ferr error
			fs.EachError(func(_ string, _ int32, err error) { ferr = err })
			if ferr != nil && !kerr.IsRetriable(ferr) {
				return nil, fmt.Errorf("processor: reading %s: %w", topic, ferr)
			}
			fs.EachRecord(func(r *kgo.Record) {
				var v blockValue
				if r.Key != nil && json.Unmarshal(r.Value, &v) == nil {
					switch e := entries[string(r.Key)]; {
					case v.State == stateBlocked:
						entries[string(r.Key)] = &BlockedKey{Key: r.Key, ID: v.ID, At: v.At, Since: time.UnixMilli(v.Since)}
					case v.State == stateReleased && e != nil && e.ID == v.ID:
						delete(entries, string(r.Key))
					}
				}
				if end, ok := ends.Lookup(topic, r.Partition); ok && r.Offset+1 >= end.Offset {
					done[r.Partition] = true
				}
			})
		}
	}
	out := make([]BlockedKey, 0, len(entries))
	for _, e := range entries {
		out = append(out, *e)
	}
	sortBlocked(out)
	return out, nil
}

// ReleaseBlockedKey writes to a group's blocked-keys table (topic) that key
// is no longer blocked by the record id (its original
// "topic/partition/offset", BlockedKey.ID), as a purge of that record from
// the DLQ does: the group's members then handle the records they held
// behind it. A release of a record that no longer blocks the key changes
// nothing. It blocks until the write is acknowledged.
func ReleaseBlockedKey(ctx context.Context, cl *kgo.Client, topic string, key []byte, id string) error {
	val, _ := json.Marshal(blockValue{State: stateReleased, ID: id})
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: key, Value: val}).FirstErr(); err != nil {
		return fmt.Errorf("processor: releasing a key in %s: %w", topic, err)
	}
	return nil
}

// forwardKeyed forwards it as plan says: the block first, then the record,
// then the release.
// It returns the record written (nil if it was not).
func (p *Processor) forwardKeyed(ctx context.Context, it *item, plan blockPlan) (*kgo.Record, error) {
	if plan.block != nil {
		if err := p.writeBlock(ctx, it.rec.Key, plan.block); err != nil {
			return nil, err
		}
	}
	to, err := p.forward(ctx, it)
	if err != nil {
		return nil, err
	}
	if plan.release != "" {
		if err := p.writeBlock(ctx, it.rec.Key, &blockValue{State: stateReleased, ID: plan.release}); err != nil {
			return nil, err
		}
	}
	return to, nil
}

package processor

import (
	"hash/maphash"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Lanes: the FIFOs of records handled one at a time (a partition, a key or a record, by
// Ordering), and the ready queue the workers take them from.

// laneKey identifies a lane inside a partition: the whole partition
// (OrderPartition: 0), one key (OrderKey: a 64-bit hash of the key, with the
// processor's random seed, nullLane for the null key), or nothing
// (OrderUnordered: offset+1, so every record is a lane of its own).
//
// A hash rather than the key itself: no string allocated and no key bytes
// hashed twice per record. Two keys whose hashes collide share a lane, which
// keeps each key's order (it only handles the two one after the other, as
// OrderPartition would); with about a thousand keys in flight the chance of
// any collision is about 2^-45.
type laneKey uint64

// nullLane is the lane of records with a null key (OrderKey).
const nullLane laneKey = 0

// lane is a FIFO of records that must be handled one at a time, in order.
// A lane is "active" from the moment it has work until it is empty: an active
// lane is in exactly one place, the ready queue, a worker, or a timer (retry
// backoff, retry-topic due time, failing forward). Only a lane held by a
// worker uses a Concurrency slot.
//
// A lane is "failing" from the first failure of its head (or from the moment
// its head has to wait for a retry-topic due time) until a head succeeds. The
// records of a failing lane are "parked": they are not counted against the
// MaxInFlight room that pauses fetching for everyone, so one poison key cannot
// stall the other keys and partitions (docs/scenarios.md S10). Parked records have a
// room of their own of the same size; when it is full, only the partitions
// holding parked records are paused.
type lane struct {
	part    *partState
	key     laneKey
	queue   []*item
	bytes   int64 // key+value bytes of queue
	active  bool
	running bool // a worker is processing queue[0] (a batch: queue[:batchN])
	batchN  int  // records of queue in a running batch (batch.go)
	waiting bool // a timer will put the lane back in the ready queue
	failing bool // the lane's records are parked (see above)
	keyHeld bool // held behind its blocked key (BlockKeys, keyblock.go): in no ready queue until released
}

func (p *Processor) laneFor(ps *partState, r *kgo.Record) *lane {
	var k laneKey
	switch p.cfg.ordering {
	case OrderPartition:
		if ps.partLane != nil {
			return ps.partLane // the partition's only lane: no map lookup per record
		}
	case OrderUnordered:
		k = laneKey(r.Offset + 1)
	case OrderKey:
		if r.Key != nil {
			k = laneKey(maphash.Bytes(p.laneSeed, r.Key))
			if k == nullLane {
				k = 1 // shares a lane with the keys hashed to 1 (see laneKey)
			}
		}
	}
	l := ps.lanes.get(k)
	if l == nil {
		l = p.newLane(ps, k)
		ps.lanes.put(k, l)
		if p.cfg.ordering == OrderPartition {
			ps.partLane = l
		}
	}
	return l
}

// newLane returns an empty lane of ps for key k, recycled if one is free.
// p.mu held.
func (p *Processor) newLane(ps *partState, k laneKey) *lane {
	n := len(p.freeLanes)
	if n == 0 {
		return &lane{part: ps, key: k}
	}
	l := p.freeLanes[n-1]
	p.freeLanes[n-1] = nil
	p.freeLanes = p.freeLanes[:n-1]
	*l = lane{part: ps, key: k, queue: l.queue[:0]}
	return l
}

// freeLaneLocked keeps l, an emptied lane that complete just deleted, for
// newLane: in OrderKey and OrderUnordered nearly every record would
// otherwise allocate a lane and its queue. Only complete's lanes are
// recycled: no timer, ready queue or worker refers to them any more (a
// lane dropped by a revoke may still be in the ready queue or have a timer
// pending). At most MaxInFlight records' worth are kept. p.mu held.
func (p *Processor) freeLaneLocked(l *lane) {
	if len(p.freeLanes) >= p.cfg.maxRecords || cap(l.queue) > 4 {
		return // a long queue's array is left to the GC
	}
	// complete left it empty, not active, running, waiting or failing,
	// and cleared each slot of its queue as its record completed; newLane
	// resets the rest. Only the partition is dropped here, so that a free
	// lane does not keep it.
	l.part = nil
	l.queue = l.queue[:0]
	p.freeLanes = append(p.freeLanes, l)
}

// deleteLane forgets lane l of ps.
func deleteLane(ps *partState, l *lane) {
	ps.lanes.del(l.key, l)
	if ps.partLane == l {
		ps.partLane = nil
	}
}

// pushReady queues an active lane for a worker. p.mu must be held.
func (p *Processor) pushReady(l *lane) {
	p.ready.push(l)
	p.wakeWorkerLocked()
}

// setFailingLocked marks lane l failing or not, moving its records in or out
// of the parked counts.
func (p *Processor) setFailingLocked(l *lane, on bool) {
	if l.failing == on {
		return
	}
	l.failing = on
	if on {
		p.parkLocked(l.part, len(l.queue), l.bytes)
	} else {
		p.parkLocked(l.part, -len(l.queue), -l.bytes)
	}
}

package processor

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchSizer scales the consumer's fetch sizes by the compression ratio of
// the batches it reads. Kafka's fetch.max.bytes and max.partition.fetch.bytes
// count compressed bytes, but the client holds what it fetched decompressed:
// a fetch of batches that compress 20:1 decodes to twenty times its size. The
// per-partition size must also hold a producer's whole batch (a broker
// returns a batch larger than it only for the fetch's first partition, so a
// smaller size makes every fetch carry one partition).
//
// It starts at the sizes a ratio of 4 would give (512 KiB per partition
// and 4 MiB per fetch at the default 64 MiB: the first fetch is bounded
// before any batch is read) and, as batches are read, sets the decoded
// bytes per partition to at most 1/32 of the MaxInFlight bytes
// (at least 64 KiB, at most Kafka's default 1 MiB of compressed bytes) and
// per fetch to at most a quarter of them, decoded (between 1 MiB and
// franz-go's default 50 MiB compressed). With the default 64 MiB: 1 MiB per
// partition for batches that barely compress, 100 KiB for 20:1. It is a
// kgo.HookFetchBatchRead; it does nothing when ClientOpts set the fetch
// sizes.
type fetchSizer struct {
	maxBytes int64
	cl       atomic.Pointer[kgo.Client]

	mu           sync.Mutex
	compressed   float64 // decaying sums of the batches read
	uncompressed float64
	fetch, part  int32 // the sizes in use
}

func newFetchSizer(maxBytes int64) *fetchSizer {
	s := &fetchSizer{maxBytes: maxBytes}
	s.fetch, s.part = s.sizes(4)
	return s
}

// sizes returns the fetch and per-partition sizes for a compression ratio.
func (s *fetchSizer) sizes(ratio float64) (fetch, part int32) {
	ratio = max(ratio, 1)
	f := min(max(int64(float64(s.maxBytes/4)/ratio), 1<<20), 50<<20)
	p := min(max(int64(float64(s.maxBytes/32)/ratio), 64<<10), 1<<20)
	return int32(f), int32(p)
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (s *fetchSizer) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	cl := s.cl.Load()
	if cl == nil || m.CompressedBytes <= 0 {
		return
	}
	s.mu.Lock()
	// Decay, so that the sizes follow a change of payloads.
	s.compressed = s.compressed*0.9 + float64(m.CompressedBytes)
	s.uncompressed = s.uncompressed*0.9 + float64(m.UncompressedBytes)
	f, p := s.sizes(s.uncompressed / s.compressed)
	// Only a change of more than an eighth is applied.
	if diff := p - s.part; diff > s.part/8 || -diff > s.part/8 {
		s.fetch, s.part = f, p
		s.mu.Unlock()
		cl.UpdateFetchMaxBytes(f, p)
		return
	}
	s.mu.Unlock()
}

// start begins adapting cl's sizes, unless ClientOpts overrode them.
func (s *fetchSizer) start(cl *kgo.Client) {
	f, _ := cl.OptValue(kgo.FetchMaxBytes).(int32)
	p, _ := cl.OptValue(kgo.FetchMaxPartitionBytes).(int32)
	if f == s.fetch && p == s.part {
		s.cl.Store(cl)
	}
}

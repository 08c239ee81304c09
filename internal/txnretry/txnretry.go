// Package txnretry is the retry backoff of the runtime's transactional
// Kafka clients (processor.NewTransactional's session, the outbox's
// transactional relay).
//
// A transaction begun right after the previous one ended reaches partitions
// whose markers of the previous transaction are still being written: with
// transactions V2 (KIP-890, Kafka 4.0 and later) such a produce is answered
// CONCURRENT_TRANSACTIONS, and franz-go retries it after its general retry
// backoff, 250 ms doubling to 5 s. On a 3-node cluster with RF 3 the markers
// take long enough that most transactions paid one to three of those waits:
// an outbox relay fed 90 rows/s committed 5 transactions in 17 s (3 s of
// produce each) where it commits 54 with this backoff. Backoff starts at
// 20 ms, franz-go's own ConcurrentTransactionsBackoff for the transactional
// requests it retries itself (and the Java producer's retry.backoff.ms
// after KAFKA-5477).
//
// A refused produce also marks its partition failing until the client's
// next metadata refresh, which franz-go makes at most every MetadataMinAge
// (5 s by default): the partition's records wait for it whatever the
// backoff. MetadataMinAge is the refresh interval of the runtime's
// transactional clients, 100 ms: on 3 nodes the 5 s default held every
// shipment of the order system in bursts 5 s apart (end-to-end p99 12 s at
// 100 orders/s).
package txnretry

import (
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Opts are the options of a transactional client that come before its
// user's (which may replace them): RetryBackoffFn(Backoff) and
// MetadataMinAge(MetadataMinAge).
func Opts() []kgo.Opt {
	return []kgo.Opt{kgo.RetryBackoffFn(Backoff), kgo.MetadataMinAge(MetadataMinAge)}
}

const (
	// MetadataMinAge is the least time between two metadata requests of a
	// transactional client (kgo.MetadataMinAge).
	MetadataMinAge = 100 * time.Millisecond
	// First is the backoff before the first retry.
	First = 20 * time.Millisecond
	// Max caps the backoff: a broker that stays away is retried once a
	// second.
	Max = time.Second
)

// Backoff returns the backoff before retry number fails (1 for the first):
// First doubled at each further failure up to Max, less up to a fifth at
// random so that clients retrying together spread out. Safe for concurrent
// use (kgo.RetryBackoffFn calls it from any goroutine).
func Backoff(fails int) time.Duration {
	d := Max
	if fails < 10 {
		d = min(Max, First<<max(0, fails-1))
	}
	return d - time.Duration(rand.Int64N(int64(d/5)+1))
}

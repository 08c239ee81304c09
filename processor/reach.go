package processor

import (
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reach tracks, through franz-go's broker hooks on the consumer's client,
// which brokers leave this member waiting: the source of Health.Unreachable.
// Its methods are safe for concurrent use (the client calls the hooks from
// its connection goroutines).
//
// Per broker address it keeps since when the member has waited for the
// broker without a single successful response (waitingSince): set by a
// request written when the member was not waiting already, or by a failed
// connect, write or read; cleared by any successful read or connect (a
// connect includes the broker's ApiVersions answer). A broker is unreachable
// when that wait is longer than after and the member still tries (it dialed
// or wrote to the broker within after): so a seed address dialed once at
// start-up and never again does not stay unreachable forever (franz-go
// times a request out after RequestTimeoutOverhead, 10s by default, and
// retries it on a new connection, which is a new try). No count of
// outstanding requests is kept: a connection that dies fails its queued
// requests without read hooks, so such a count would drift.
//
// JoinGroup and SyncGroup do not start a wait: the coordinator holds them by
// design until the group's members have (re)joined, up to the rebalance
// timeout. A fetch is answered within the fetch max wait, which after must
// exceed.
type reach struct {
	after time.Duration
	now   func() time.Time // time.Now; tests set a fake clock
	mu    sync.Mutex
	addrs map[string]*brokerReach
}

type brokerReach struct {
	waitingSince time.Time // zero: not waiting
	lastTry      time.Time // last connect or write attempt
}

var (
	_ kgo.HookBrokerConnect = (*reach)(nil)
	_ kgo.HookBrokerWrite   = (*reach)(nil)
	_ kgo.HookBrokerRead    = (*reach)(nil)
)

func newReach(after time.Duration) *reach {
	return &reach{after: after, now: time.Now, addrs: map[string]*brokerReach{}}
}

func (r *reach) broker(meta kgo.BrokerMetadata) *brokerReach {
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	b := r.addrs[addr]
	if b == nil {
		b = &brokerReach{}
		r.addrs[addr] = b
	}
	return b
}

func (b *brokerReach) wait(now time.Time) {
	if b.waitingSince.IsZero() {
		b.waitingSince = now
	}
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (r *reach) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	r.mu.Lock()
	now := r.now()
	defer r.mu.Unlock()
	b := r.broker(meta)
	b.lastTry = now
	if err != nil {
		b.wait(now)
	} else {
		b.waitingSince = time.Time{}
	}
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (r *reach) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	r.mu.Lock()
	now := r.now()
	defer r.mu.Unlock()
	b := r.broker(meta)
	b.lastTry = now
	if err != nil || (key != int16(kmsg.JoinGroup) && key != int16(kmsg.SyncGroup)) {
		b.wait(now)
	}
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (r *reach) OnBrokerRead(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	r.mu.Lock()
	now := r.now()
	defer r.mu.Unlock()
	b := r.broker(meta)
	if err != nil {
		b.wait(now)
	} else {
		b.waitingSince = time.Time{}
	}
}

// unreachable returns the addresses ("host:port") of the brokers this member
// has waited for longer than r.after while still trying, sorted.
func (r *reach) unreachable(now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for addr, b := range r.addrs {
		if !b.waitingSince.IsZero() && now.Sub(b.waitingSince) > r.after && now.Sub(b.lastTry) <= r.after {
			out = append(out, addr)
		}
	}
	slices.Sort(out)
	return out
}

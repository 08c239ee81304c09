package processor

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The reachability rules of Health.Unreachable, on a fake clock: each step
// runs a hook at time at (milliseconds) and then checks the brokers reported
// unreachable at that time.
func TestReach(t *testing.T) {
	const after = time.Second
	a := kgo.BrokerMetadata{NodeID: 1, Host: "a", Port: 1}
	b := kgo.BrokerMetadata{NodeID: 2, Host: "b", Port: 2}
	fail := errors.New("i/o timeout")
	type step struct {
		at   int64
		hook func(r *reach)
		want []string
	}
	write := func(m kgo.BrokerMetadata, key kmsg.Key) func(*reach) {
		return func(r *reach) { r.OnBrokerWrite(m, int16(key), 10, 0, 0, nil) }
	}
	read := func(m kgo.BrokerMetadata, err error) func(*reach) {
		return func(r *reach) { r.OnBrokerRead(m, int16(kmsg.Fetch), 10, 0, 0, err) }
	}
	connect := func(m kgo.BrokerMetadata, err error) func(*reach) {
		return func(r *reach) { r.OnBrokerConnect(m, 0, nil, err) }
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"answered", []step{
			{0, write(a, kmsg.Fetch), nil},
			{900, read(a, nil), nil},
			{2500, write(a, kmsg.Heartbeat), nil},
		}},
		{"no answer while retrying", []step{
			{0, write(a, kmsg.OffsetCommit), nil},
			{600, read(a, fail), nil},
			{700, connect(a, nil), nil}, // an answered connect: reachable again
			{800, write(a, kmsg.OffsetCommit), nil},
			{1400, read(a, fail), nil},
			{1500, write(a, kmsg.ApiVersions), nil},
			{1900, connect(a, fail), []string{"a:1"}},
			{2000, write(b, kmsg.Fetch), []string{"a:1"}},
			{2100, read(a, nil), nil},
		}},
		{"refused connections", []step{
			{0, connect(a, fail), nil},
			{500, connect(a, fail), nil},
			{1100, connect(a, fail), []string{"a:1"}},
			{1200, connect(a, nil), nil},
		}},
		{"given up: a seed not dialed again", []step{
			{0, write(a, kmsg.Metadata), nil},
			{300, read(a, fail), nil},
			{1200, nil, nil},
		}},
		{"join held by the coordinator", []step{
			{0, write(a, kmsg.JoinGroup), nil},
			{1500, write(a, kmsg.SyncGroup), nil},
			{3000, nil, nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := time.Unix(1000, 0)
			var now time.Time
			r := newReach(after)
			r.now = func() time.Time { return now }
			for i, s := range tc.steps {
				now = base.Add(time.Duration(s.at) * time.Millisecond)
				if s.hook != nil {
					s.hook(r)
				}
				if got := r.unreachable(now); !slices.Equal(got, s.want) {
					t.Errorf("step %d (at %dms): unreachable %v, want %v", i, s.at, got, s.want)
				}
			}
		})
	}
}

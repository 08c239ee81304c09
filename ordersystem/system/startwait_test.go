package system_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// A service started while the cluster is briefly away waits for it (found by
// the crash harness on a 3-node cluster: services started while a broker
// restarted stopped at once with "broker closed the connection immediately",
// and were restarted 1,713 times in one seed). Each kind of start request
// fails twice here, the connection dropped or a retriable error answered;
// the start goes on. With the single-attempt checks, Start returned the
// first of these errors.
func TestStartWaitsOutATransientBrokerFailure(t *testing.T) {
	testkafka.SkipIfReal(t, "injects broker faults (kfake)")
	for _, tc := range []struct {
		name string
		key  kmsg.Key
		// match picks the requests to fail (nil: all of the key).
		match func(kmsg.Request) bool
		fail  func(kmsg.Request) (kmsg.Response, error)
	}{
		{"probe connection dropped", kmsg.Metadata,
			func(r kmsg.Request) bool {
				return r.(*kmsg.MetadataRequest).Topics != nil && len(r.(*kmsg.MetadataRequest).Topics) == 0
			},
			func(kmsg.Request) (kmsg.Response, error) { return nil, errors.New("injected: connection dropped") }},
		{"rights check connection dropped", kmsg.Metadata,
			func(r kmsg.Request) bool { return r.(*kmsg.MetadataRequest).IncludeTopicAuthorizedOperations },
			func(kmsg.Request) (kmsg.Response, error) { return nil, errors.New("injected: connection dropped") }},
		{"topic creation connection dropped", kmsg.CreateTopics, nil,
			func(kmsg.Request) (kmsg.Response, error) { return nil, errors.New("injected: connection dropped") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, brokers := testkafka.Fake(t, nil)
			var mu sync.Mutex
			failed := 0
			c.ControlKey(int16(tc.key), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if tc.match != nil && !tc.match(req) {
					return nil, nil, false
				}
				mu.Lock()
				defer mu.Unlock()
				if failed >= 2 {
					return nil, nil, false
				}
				failed++
				resp, err := tc.fail(req)
				return resp, err, true
			})
			sys, err := startOn(t, brokers, system.Config{})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = sys.Stop(ctx)
			mu.Lock()
			defer mu.Unlock()
			if failed != 2 {
				t.Fatalf("%d requests failed, want 2 (the fault did not reach the start check)", failed)
			}
		})
	}
}

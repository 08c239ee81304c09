package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/dbtest"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/outbox"
)

const (
	relayUser      = "relay"
	relayPass      = "relay-secret"
	relayPrincipal = "User:" + relayUser
)

// committedCount counts the data records of topic that a read_committed
// reader sees, read as testkafka.Secure's super user.
func committedCount(t *testing.T, addrs []string, topic string) int {
	t.Helper()
	ctx := ctxT(t)
	cl, err := kgo.NewClient(append(testkafka.AdminOpts(addrs), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	n := 0
	for len(want) > 0 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				n++
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	if len(want) > 0 {
		t.Fatalf("%s: %d partitions not read to their last stable offset", topic, len(want))
	}
	return n
}

// TestRelayRightLostWhileRunning: an ACL the outbox relay needs is deleted
// while it runs (WRITE on the rows' topic; in the exactly-once mode also
// WRITE on its transactional id). Run must stop by itself with an
// *outbox.AuthorizationError naming the right, not retry for ever, and lose
// nothing: every row not visible to a read_committed reader stays unsent,
// so the next Run publishes it. Checked failing without the relay's
// stopOnAuthz (Run ran on for 30s, retrying).
func TestRelayRightLostWhileRunning(t *testing.T) {
	cases := []struct {
		name     string
		txn      bool
		revoke   *kadm.ACLBuilder
		kind, on string
	}{
		{"at least once, topic WRITE", false, testkafka.ACLs(relayPrincipal, kmsg.ACLResourceTypeTopic, "t", kmsg.ACLOperationWrite), "Topic", "t"},
		{"exactly once, topic WRITE", true, testkafka.ACLs(relayPrincipal, kmsg.ACLResourceTypeTopic, "t", kmsg.ACLOperationWrite), "Topic", "t"},
		{"exactly once, transactional id WRITE", true,
			testkafka.ACLs(relayPrincipal, kmsg.ACLResourceTypeTransactionalId, outbox.DefaultTransactionalID("pay"), kmsg.ACLOperationWrite),
			"TransactionalId", outbox.DefaultTransactionalID("pay")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addrs := testkafka.Secure(t, map[string]int32{"t": 3}, map[string]string{relayUser: relayPass})
			testkafka.Allow(t, addrs, testkafka.ACLs(relayPrincipal, kmsg.ACLResourceTypeTopic, "t", kmsg.ACLOperationWrite))
			testkafka.Allow(t, addrs, testkafka.ACLs(relayPrincipal, kmsg.ACLResourceTypeTransactionalId, outbox.DefaultTransactionalID("pay"), kmsg.ACLOperationWrite))
			testkafka.Allow(t, addrs, testkafka.ACLs(relayPrincipal, kmsg.ACLResourceTypeTopic, outbox.DefaultMarkerTopic("pay"),
				kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate))
			db := dbtest.SQLite(t, dbtest.Runtime)
			login := append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, testkafka.Login(relayUser, relayPass)...)
			var relay *outbox.Relay
			opts := []outbox.Opt{outbox.Logger(quiet), outbox.PollInterval(20 * time.Millisecond), outbox.Backoff(10*time.Millisecond, 100*time.Millisecond)}
			if c.txn {
				var err error
				if relay, err = outbox.NewTransactionalRelay(db, "pay", login, opts...); err != nil {
					t.Fatal(err)
				}
			} else {
				relay = newRelay(t, db, producer(t, addrs, login...), opts...)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- relay.Run(ctx) }()
			enqueue(t, db, "t", 3, 1, 2, 3)
			waitFor(t, "3 rows published", func() bool { return pending(t, db) == 0 })
			testkafka.Revoke(t, addrs, c.revoke)
			enqueue(t, db, "t", 3, 4, 5, 6)
			relay.Notify()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				cancel()
				<-done
				t.Fatal("Run still running 30s after the right was revoked: the refusal is retried for ever")
			}
			var ae *outbox.AuthorizationError
			if !errors.As(err, &ae) || ae.Resource != c.kind || ae.Name != c.on || ae.Operation != "WRITE" {
				t.Fatalf("Run returned %v (%+v), want an *outbox.AuthorizationError for WRITE on %s %s", err, ae, c.kind, c.on)
			}
			t.Logf("Run: %v", err)
			if got, unsent := committedCount(t, addrs, "t"), pending(t, db); got+unsent < 6 || (c.txn && got+unsent != 6) {
				t.Fatalf("%d rows visible to read_committed readers and %d unsent, of 6: rows lost", got, unsent)
			}
		})
	}
}

package system

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/outbox"
)

// aclLayout is the topic layout of the ACL tests: two retry topics per
// group.
var aclLayout = ops.Layout{Partitions: 1, ReplicationFactor: 1, RetryDelays: []time.Duration{time.Second, 10 * time.Second}}

// secureBroker starts the embedded broker with SCRAM-SHA-512 and ACLs
// (testkafka.Secure: the embedded one, or the secured Kafka 4.4 node of
// ORDERCAST_TEST_SECURE_BROKERS), the system topics of aclLayout created, and one
// user per service of svcs ("ordercast-<svc>", password "pw-<svc>"), with
// no ACL yet.
func secureBroker(t *testing.T, svcs ...string) []string {
	t.Helper()
	users := map[string]string{}
	for _, s := range svcs {
		users["ordercast-"+s] = "pw-" + s
	}
	topics := map[string]int32{}
	for _, ts := range ops.SystemTopics(aclLayout) {
		topics[ts.Name] = ts.Partitions
	}
	addrs := testkafka.Secure(t, topics, users)
	return addrs
}

// grant creates ALLOW ACLs for principal, one per right (its pattern
// type), as the super user.
func grant(t *testing.T, addrs []string, principal string, rights ...Right) {
	t.Helper()
	for _, r := range rights {
		b := testkafka.ACLs(principal, r.Type, r.Name, r.Operation)
		if r.Pattern == kmsg.ACLResourcePatternTypePrefixed {
			b.ResourcePatternType(kadm.ACLPatternPrefixed)
		}
		testkafka.Allow(t, addrs, b)
	}
}

// without is rights minus the drop ones.
func without(rights []Right, drop ...Right) []Right {
	return slices.DeleteFunc(slices.Clone(rights), func(r Right) bool { return slices.Contains(drop, r) })
}

// serviceClient is a client logged in as svc's principal.
func serviceClient(t *testing.T, addrs []string, svc string) (*kgo.Client, []kgo.Opt) {
	t.Helper()
	opts := append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, testkafka.Login("ordercast-"+svc, "pw-"+svc)...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, opts
}

func topicRight(name string, op kmsg.ACLOperation) Right {
	return Right{Type: kmsg.ACLResourceTypeTopic, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op}
}

// TestCheckRights runs the start check (checkRights: KIP-430 authorized
// operations of the topics and groups, DescribeTransactions for the
// transactional ids) on the embedded broker with ACLs, for each service:
// with all of Rights granted it passes; with some of them left out it
// returns a *MissingRightsError listing exactly those, in Rights order,
// naming the principal and the service, that errors.Is matches to the
// kinds of right missing.
func TestCheckRights(t *testing.T) {
	txnRight := func(svc string) Right {
		for _, r := range Rights(svc, aclLayout) {
			if r.Type == kmsg.ACLResourceTypeTransactionalId {
				return r
			}
		}
		t.Fatalf("%s has no transactional id right", svc)
		return Right{}
	}
	groupRead := func(svc string) Right {
		return Right{Type: kmsg.ACLResourceTypeGroup, Name: svc, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationRead}
	}
	cases := []struct {
		svc     string
		missing []Right
		is      []error
	}{
		{svc: ServiceCheckout},
		{svc: ServiceOrders},
		{svc: ServicePayments},
		{svc: ServiceNotifications},
		{svc: ServiceFulfillment},
		{svc: ServicePayments, missing: []Right{topicRight("paymentProcessed", kmsg.ACLOperationWrite)}, is: []error{kerr.TopicAuthorizationFailed}},
		{svc: ServicePayments, missing: []Right{groupRead(ServicePayments), topicRight("orderCreated", kmsg.ACLOperationRead),
			topicRight("payments.retry.2", kmsg.ACLOperationWrite), topicRight("payments.dlq", kmsg.ACLOperationWrite), txnRight(ServicePayments)},
			is: []error{kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed}},
		{svc: ServiceFulfillment, missing: []Right{txnRight(ServiceFulfillment)}, is: []error{kerr.TransactionalIDAuthorizationFailed}},
		{svc: ServiceCheckout, missing: []Right{topicRight("orderCreated", kmsg.ACLOperationWrite)}, is: []error{kerr.TopicAuthorizationFailed}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-missing-%d", c.svc, len(c.missing)), func(t *testing.T) {
			addrs := secureBroker(t, c.svc)
			rights := Rights(c.svc, aclLayout)
			principal := "User:ordercast-" + c.svc
			grant(t, addrs, principal, without(rights, c.missing...)...)
			cl, _ := serviceClient(t, addrs, c.svc)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := checkRights(ctx, cl, principal, []string{c.svc}, rights, "m1")
			if len(c.missing) == 0 {
				if err != nil {
					t.Fatalf("checkRights with every right of Rights granted: %v", err)
				}
				return
			}
			var me *MissingRightsError
			if !errors.As(err, &me) {
				t.Fatalf("checkRights = %v, want a *MissingRightsError", err)
			}
			want := slices.DeleteFunc(slices.Clone(rights), func(r Right) bool { return !slices.Contains(c.missing, r) })
			if fmt.Sprint(me.Missing) != fmt.Sprint(want) || me.Principal != principal || fmt.Sprint(me.Services) != fmt.Sprint([]string{c.svc}) {
				t.Fatalf("missing %v of %s for %v, want %v of %s", me.Missing, me.Principal, me.Services, want, principal)
			}
			for _, k := range c.is {
				if !errors.Is(err, k) {
					t.Errorf("errors.Is(%v, %v) = false", err, k)
				}
			}
			for _, r := range want {
				if !strings.Contains(err.Error(), r.String()) || !strings.Contains(err.Error(), principal) {
					t.Errorf("%q does not name %s and %s", err, principal, r)
				}
			}
		})
	}
}

// TestCheckTxnWrite: a principal granted DESCRIBE but not WRITE on the
// outbox relay's transactional id passes checkRights (DescribeTransactions
// needs only DESCRIBE), so payments would start and meet the refusal only
// at its relay's first run; checkTxnWrite's InitProducerID finds it at
// start and names the right. With WRITE granted it passes.
func TestCheckTxnWrite(t *testing.T) {
	addrs := secureBroker(t, ServicePayments)
	rights := Rights(ServicePayments, aclLayout)
	principal := "User:ordercast-payments"
	txnID := outbox.DefaultTransactionalID(ServicePayments)
	write := Right{Type: kmsg.ACLResourceTypeTransactionalId, Name: txnID, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite}
	describe := write
	describe.Operation = kmsg.ACLOperationDescribe
	grant(t, addrs, principal, append(without(rights, write), describe)...)
	cl, kopts := serviceClient(t, addrs, ServicePayments)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := checkRights(ctx, cl, principal, []string{ServicePayments}, rights, "m1"); err != nil {
		t.Fatalf("checkRights: %v (the gap this test is about: it cannot see WRITE)", err)
	}
	cfg := Config{
		Kafka: KafkaConfig{Principal: principal},
	}
	cfg.defaults()
	err := checkTxnWrite(ctx, kopts, cfg, txnID)
	var me *MissingRightsError
	if !errors.As(err, &me) || fmt.Sprint(me.Missing) != fmt.Sprint([]Right{write}) || !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("checkTxnWrite with DESCRIBE only = %v, want a *MissingRightsError for %s", err, write)
	}
	if !strings.Contains(err.Error(), principal) || !strings.Contains(err.Error(), "WRITE on TransactionalId "+txnID) {
		t.Fatalf("%q does not name the principal and the right", err)
	}
	grant(t, addrs, principal, write)
	if err := checkTxnWrite(ctx, kopts, cfg, txnID); err != nil {
		t.Fatalf("checkTxnWrite with WRITE granted: %v", err)
	}
}

// startAs starts svc on addrs as its principal ("ordercast-<svc>", logged
// in with SCRAM-SHA-512) with the aclLayout topics, a fresh srfake
// registry and a SQLite database of its own.
func startAs(t *testing.T, addrs []string, svc string) (*System, error) {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return Start(ctx, Config{
		Services:  []string{svc},
		Kafka:     KafkaConfig{Brokers: addrs, Layout: aclLayout, ClientOpts: testkafka.Login("ordercast-"+svc, "pw-"+svc), Principal: "User:ordercast-" + svc},
		Schema:    SchemaConfig{RegistryURL: reg.URL()},
		HTTP:      HTTPConfig{Addr: "127.0.0.1:0"},
		DB:        DBConfig{DSN: "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")},
		Consumers: ConsumerConfig{MemberID: "m1", SessionTimeout: time.Second},
	})
}

// TestStartChecksRelayTxnWrite: payments granted every right of Rights but
// WRITE on its outbox relay's transactional id, with DESCRIBE on it
// instead, is refused at start (before anything is consumed or committed)
// with a *MissingRightsError naming the principal and WRITE on
// TransactionalId ordercast-outbox-payments; with WRITE it starts. Checked
// failing without Start's checkTxnWrite (payments started, its relay met
// the refusal at its first session).
func TestStartChecksRelayTxnWrite(t *testing.T) {
	addrs := secureBroker(t, ServicePayments)
	principal := "User:ordercast-payments"
	txnID := outbox.DefaultTransactionalID(ServicePayments)
	write := Right{Type: kmsg.ACLResourceTypeTransactionalId, Name: txnID, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite}
	describe := write
	describe.Operation = kmsg.ACLOperationDescribe
	grant(t, addrs, principal, append(without(Rights(ServicePayments, aclLayout), write), describe)...)
	sys, err := startAs(t, addrs, ServicePayments)
	if err == nil {
		_ = sys.Stop(context.Background())
		t.Fatal("payments started without WRITE on its relay's transactional id")
	}
	var me *MissingRightsError
	if !errors.As(err, &me) || fmt.Sprint(me.Missing) != fmt.Sprint([]Right{write}) ||
		!strings.Contains(err.Error(), principal) || !strings.Contains(err.Error(), "WRITE on TransactionalId "+txnID) {
		t.Fatalf("Start = %v, want a *MissingRightsError naming %s and %s", err, principal, write)
	}
	t.Logf("Start: %v", err)
	grant(t, addrs, principal, write)
	sys, err = startAs(t, addrs, ServicePayments)
	if err != nil {
		t.Fatalf("payments with every right: %v", err)
	}
	_ = sys.Stop(context.Background())
}

// TestServiceLosesRightWhileRunning: orders runs as its principal with its
// rights; READ on its group, or on a topic it consumes, is then deleted.
// The member must stop (Failed is closed: no member retrying for ever)
// with an error naming the service, the principal and the right lost.
// Checked failing without the processor's authz.go (with the topic's READ
// gone the member ran on for 30s; with the group's, the error listed every
// group right of orders, not the one lost).
func TestServiceLosesRightWhileRunning(t *testing.T) {
	for _, lost := range []Right{
		{Type: kmsg.ACLResourceTypeGroup, Name: ServiceOrders, Operation: kmsg.ACLOperationRead},
		{Type: kmsg.ACLResourceTypeTopic, Name: "orderCreated", Operation: kmsg.ACLOperationRead},
	} {
		t.Run(lost.String(), func(t *testing.T) {
			addrs := secureBroker(t, ServiceOrders)
			principal := "User:ordercast-orders"
			grant(t, addrs, principal, Rights(ServiceOrders, aclLayout)...)
			sys, err := startAs(t, addrs, ServiceOrders)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sys.Stop(context.Background()) })
			testkafka.WaitFor(t, 30*time.Second, "orders joined", func() bool {
				h := sys.Health(context.Background())
				return len(h.Members) == 1 && h.Members[0].Joined && len(h.Members[0].Partitions) > 0
			})
			testkafka.Revoke(t, addrs, testkafka.ACLs(principal, lost.Type, lost.Name, lost.Operation))
			select {
			case <-sys.Failed():
			case <-time.After(30 * time.Second):
				t.Fatalf("orders still running 30s after %s was deleted", lost)
			}
			err = sys.Err()
			for _, want := range []string{"service orders stopped", principal, "lost " + lost.String()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Err: %q lacks %q", err, want)
				}
			}
			t.Logf("Err: %v", err)
		})
	}
}

// TestOnlyPaymentsWritesPaymentProcessed: of the ACL sets Rights gives,
// only payments' writes paymentProcessed (no other service's right names
// it, literally or by a prefix), and on a broker with ACLs every other
// service's principal, granted all of its Rights, is refused a write there
// (TOPIC_AUTHORIZATION_FAILED), while payments' is accepted: on a real
// cluster set up with Rights, no principal but payments' can forge the PAID
// event fulfillment ships by.
func TestOnlyPaymentsWritesPaymentProcessed(t *testing.T) {
	for _, svc := range AllServices {
		writes := false
		for _, r := range Rights(svc, aclLayout) {
			if r.Type == kmsg.ACLResourceTypeTopic && r.Operation == kmsg.ACLOperationWrite &&
				(r.Name == order.TopicPaymentProcessed || r.Pattern != kmsg.ACLResourcePatternTypeLiteral && strings.HasPrefix(order.TopicPaymentProcessed, r.Name)) {
				writes = true
			}
		}
		if writes != (svc == ServicePayments) {
			t.Errorf("Rights(%s) writes %s: %v", svc, order.TopicPaymentProcessed, writes)
		}
	}
	addrs := secureBroker(t, AllServices...)
	for _, svc := range AllServices {
		grant(t, addrs, "User:ordercast-"+svc, Rights(svc, aclLayout)...)
	}
	for _, svc := range AllServices {
		cl, _ := serviceClient(t, addrs, svc)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: order.TopicPaymentProcessed, Key: []byte("ord_forged"), Value: []byte("forged")}).FirstErr()
		cancel()
		if svc == ServicePayments {
			if err != nil {
				t.Errorf("payments' write to %s: %v", order.TopicPaymentProcessed, err)
			}
		} else if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Errorf("%s's write to %s: %v; want TOPIC_AUTHORIZATION_FAILED", svc, order.TopicPaymentProcessed, err)
		}
	}
}

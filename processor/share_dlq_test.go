package processor_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/processor"
)

// TestQueueBrokerDLQ (real Kafka 4.4, share.version=2; kfake has no
// share-group DLQ, KIP-1191): a queue member with the runtime's DLQ off
// (DeadLetter(false)) REJECTs a record that fails permanently, and the
// broker writes it to the group's own DLQ topic
// (errors.deadletterqueue.topic.name, which must start with the broker's
// errors.deadletterqueue.topic.name.prefix, "dlq." by default, and have
// errors.deadletterqueue.group.enable=true), with the broker's
// __dlq.errors.* headers naming the group, the record's coordinates and
// its delivery count, and (errors.deadletterqueue.copy.record.enable) the
// record's key and value. The records handled are not there.
func TestQueueBrokerDLQ(t *testing.T) {
	if !testkafka.Real() {
		t.Skipf("needs a real Kafka 4.4 (%s): kfake has no share-group DLQ (KIP-1191)", testkafka.EnvBrokers)
	}
	const group, in, dlq = "bdlq", "bdlq.in", "dlq.bdlq"
	addrs := testkafka.Cluster(t, map[string]int32{in: 1, dlq: 1})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	alter := func(set func() error, what string) {
		t.Helper()
		if err := set(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	alter(func() error {
		r, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "errors.deadletterqueue.group.enable", Value: kadm.StringPtr("true")}}, dlq)
		if err == nil {
			_, err = r.On(dlq, nil)
		}
		return err
	}, "enable "+dlq+" as a share-group DLQ")
	alter(func() error {
		req := func(name, value string) kadm.AlterConfig {
			return kadm.AlterConfig{Op: kadm.SetConfig, Name: name, Value: kadm.StringPtr(value)}
		}
		return alterGroupConfigs(ctx, cl, group, req("errors.deadletterqueue.topic.name", dlq), req("errors.deadletterqueue.copy.record.enable", "true"))
	}, "set the group's DLQ")

	testkafka.Produce(t, addrs, &kgo.Record{Topic: in, Key: []byte("k1"), Value: []byte("good")},
		&kgo.Record{Topic: in, Key: []byte("k2"), Value: []byte("poison")}, &kgo.Record{Topic: in, Key: []byte("k3"), Value: []byte("good")})
	handled := make(chan string, 16)
	q, err := processor.NewQueue(processor.Brokers(addrs...), processor.Group(group), processor.Topics(in), processor.DeadLetter(false),
		processor.DrainTimeout(200*time.Millisecond),
		processor.WithHandler(func(_ context.Context, r *kgo.Record) error {
			if string(r.Value) == "poison" {
				return processor.Permanentf("poison at %d", r.Offset)
			}
			handled <- string(r.Key)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	testkafka.Run(t, q)
	got := testkafka.ReadN(t, addrs, dlq, 1, 60*time.Second, false)
	r := got[0]
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	t.Logf("broker DLQ record: key %q value %q headers %v", r.Key, r.Value, h)
	for k, want := range map[string]string{
		"__dlq.errors.group": group, "__dlq.errors.topic": in, "__dlq.errors.partition": "0", "__dlq.errors.offset": "1",
	} {
		if h[k] != want {
			t.Errorf("header %s = %q, want %q", k, h[k], want)
		}
	}
	if n, err := strconv.Atoi(h["__dlq.errors.delivery.count"]); err != nil || n < 1 {
		t.Errorf("header __dlq.errors.delivery.count = %q, want a delivery count >= 1", h["__dlq.errors.delivery.count"])
	}
	if string(r.Key) != "k2" || string(r.Value) != "poison" {
		t.Errorf("DLQ record %q=%q, want the rejected record k2=poison (copy.record.enable)", r.Key, r.Value)
	}
	for _, k := range []string{"k1", "k3"} {
		select {
		case got := <-handled:
			if got != "k1" && got != "k3" {
				t.Errorf("handled %q", got)
			}
		case <-ctx.Done():
			t.Fatalf("record %s not handled", k)
		}
	}
	// Nothing else reaches the broker's DLQ: the records handled are not rejected.
	recs := testkafka.ReadN(t, addrs, dlq, 2, 5*time.Second, false)
	if len(recs) != 1 {
		t.Errorf("broker DLQ holds %d records, want 1", len(recs))
	}
}

// alterGroupConfigs sets group configs (IncrementalAlterConfigs on the
// GROUP resource).
func alterGroupConfigs(ctx context.Context, cl *kgo.Client, group string, cfgs ...kadm.AlterConfig) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	for _, c := range cfgs {
		cv := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cv.Name, cv.Op, cv.Value = c.Name, kmsg.IncrementalAlterConfigOpSet, c.Value
		res.Configs = append(res.Configs, cv)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = *r.ErrorMessage
			}
			return fmt.Errorf("%w: %s", err, msg)
		}
	}
	return nil
}

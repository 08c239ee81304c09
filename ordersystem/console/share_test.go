package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/console"
	"github.com/ordercast/ordercast/processor"
)

// A share group (KIP-932) shows on the overview and on a group page of its
// own, as type share with its member, its start offsets under "start
// (SPSO)" and no offset reset form; a reset asked anyway is refused as a
// share group's.
func TestShareGroupPages(t *testing.T) {
	brokers := testkafka.Cluster(t, map[string]int32{"in": 2, "sg.dlq": 1})
	testkafka.Produce(t, brokers, &kgo.Record{Topic: "in", Value: []byte("a")}, &kgo.Record{Topic: "in", Partition: 1, Value: []byte("b")})
	var handled atomic.Int64
	q, err := processor.NewQueue(processor.Brokers(brokers...), processor.Group("sg"), processor.Topics("in"), processor.DrainTimeout(200*time.Millisecond),
		processor.WithHandler(func(context.Context, *kgo.Record) error { handled.Add(1); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	testkafka.Run(t, q)
	c, err := console.New(console.Config{Kafka: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Groups: []string{"orders"}, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	var body string
	testkafka.WaitFor(t, 60*time.Second, "the group page showing the share group with its member", func() bool {
		var code int
		code, _, body = get(t, srv.Client(), srv.URL+"/console/groups/sg")
		return code == http.StatusOK && handled.Load() == 2 && strings.Contains(body, q.Health().ClientID) && strings.Contains(body, "protocol share/")
	})
	for _, want := range []string{"start (SPSO)", "kafka-share-groups.sh --reset-offsets"} {
		if !strings.Contains(body, want) {
			t.Errorf("group page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `action="/console/groups/sg/reset"`) {
		t.Errorf("group page offers an offset reset for a share group:\n%s", body)
	}
	code, _, body := get(t, srv.Client(), srv.URL+"/console/")
	if code != http.StatusOK || !strings.Contains(body, `href="/console/groups/sg"`) {
		t.Errorf("overview with a share group: %d\n%s", code, body)
	}
}

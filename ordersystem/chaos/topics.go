package chaos

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/ordersystem/audit"
	"github.com/ordercast/ordercast/ordersystem/schema"
)

// The harness reads and decodes the topics with audit's readers (one way
// for `ordercast up --report`, the end-to-end tests and the crash harness).

// topicView is audit.View under the harness's field names.
type topicView struct {
	records         []*kgo.Record
	aborts, commits int
}

func readTopic(ctx context.Context, cl *kgo.Client, topic string, committed bool) (*topicView, error) {
	v, err := audit.ReadView(ctx, cl, topic, committed)
	if err != nil {
		return nil, err
	}
	return &topicView{records: v.Records, aborts: v.Aborts, commits: v.Commits}, nil
}

func readDecided(ctx context.Context, cl *kgo.Client, topic string) ([]*kgo.Record, int, error) {
	return audit.ReadDecided(ctx, cl, topic)
}

// eventInfo is audit.Event under the harness's field names.
type eventInfo struct {
	topic, eventID, orderID, status string
	total                           int64
}

func decodeEvent(ctx context.Context, serde *schema.Serde, r *kgo.Record) (eventInfo, bool) {
	ev, ok := audit.DecodeEvent(ctx, serde, r)
	return eventInfo{topic: ev.Topic, eventID: ev.EventID, orderID: ev.OrderID, status: ev.Status, total: ev.Total}, ok
}

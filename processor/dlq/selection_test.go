package dlq_test

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/processor/dlq"
)

// TestSelectionFields: each Selection field narrows List and a dry-run
// Replay alike, and the fields combine (all must match).
func TestSelectionFields(t *testing.T) {
	ctx := context.Background()
	addrs, _ := testCluster(t, map[string]int32{"a": 1, "b": 1, "s.dlq": 2})
	produce(t, addrs,
		dlqRec("s", 0, "k1", "v1", "permanent", "a", 0), // s.dlq/0/0
		dlqRec("s", 0, "k2", "v2", "transient", "b", 0), // s.dlq/0/1
		dlqRec("s", 0, "k3", "v3", "permanent", "b", 1), // s.dlq/0/2
		dlqRec("s", 1, "k1", "v4", "invalid", "a", 1),   // s.dlq/1/0
	)
	d, err := dlq.New("s", kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range []struct {
		name string
		sel  dlq.Selection
		want []string
	}{
		{"all", dlq.Selection{}, []string{"s.dlq/0/0", "s.dlq/0/1", "s.dlq/0/2", "s.dlq/1/0"}},
		{"original topic", dlq.Selection{OriginalTopics: []string{"b"}}, []string{"s.dlq/0/1", "s.dlq/0/2"}},
		{"class", dlq.Selection{Classes: []string{"permanent", "invalid"}}, []string{"s.dlq/0/0", "s.dlq/0/2", "s.dlq/1/0"}},
		{"key", dlq.Selection{Keys: []string{"k1"}}, []string{"s.dlq/0/0", "s.dlq/1/0"}},
		{"id", dlq.Selection{IDs: []string{"s.dlq/1/0", "s.dlq/0/1"}}, []string{"s.dlq/0/1", "s.dlq/1/0"}},
		{"partition", dlq.Selection{Partitions: []int32{1}}, []string{"s.dlq/1/0"}},
		{"offsets", dlq.Selection{From: 1, Until: 2}, []string{"s.dlq/0/1"}},
		{"topic and class", dlq.Selection{OriginalTopics: []string{"a"}, Classes: []string{"permanent"}}, []string{"s.dlq/0/0"}},
	} {
		l, err := d.List(ctx, c.sel, 0)
		if err != nil {
			t.Fatalf("%s: List: %v", c.name, err)
		}
		var got []string
		for _, r := range l.Records {
			got = append(got, r.ID)
		}
		if !slices.Equal(got, c.want) || l.Selected != len(c.want) {
			t.Errorf("%s: List selected %d %v, want %v", c.name, l.Selected, got, c.want)
		}
		res, err := d.Replay(ctx, dlq.ReplayOptions{Selection: c.sel, DryRun: true})
		if err != nil {
			t.Fatalf("%s: dry-run Replay: %v", c.name, err)
		}
		got = got[:0]
		for _, r := range res.Replayed {
			got = append(got, r.From)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: dry-run Replay would replay %v, want %v", c.name, got, c.want)
		}
	}
}

package schema

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// wireOrderCreatedV1 is what a build that only knew orderCreated v1 encoded
// and decoded: the wire struct without channel.
type wireOrderCreatedV1 struct {
	EventID    string       `json:"eventId"`
	OrderID    string       `json:"orderId"`
	CustomerID *string      `json:"customerId"`
	Country    *string      `json:"country"`
	Lines      []order.Line `json:"lines"`
	TotalMilli order.Money  `json:"totalMilli"`
	CreatedAt  time.Time    `json:"createdAt"`
	Reference  *string      `json:"reference"`
}

func TestVersionsAreEmbedded(t *testing.T) {
	for _, topic := range Topics() {
		n := Versions(topic)
		if n < 1 {
			t.Fatalf("%s: no released version embedded", topic)
		}
		for v := 1; v <= n; v++ {
			disk, err := os.ReadFile(filepath.Join("avro", "history", topic+".v"+strconv.Itoa(v)+".avsc"))
			if err != nil || string(disk) != releases[topic][v-1] {
				t.Errorf("%s v%d: embedded text differs from the file (%v)", topic, v, err)
			}
		}
	}
	if Versions(order.TopicOrderCreated) < 2 {
		t.Errorf("orderCreated has %d released versions, want at least 2 (v2 added channel)", Versions(order.TopicOrderCreated))
	}
	if Versions("nope") != 0 {
		t.Errorf("Versions of a topic without a schema is not 0")
	}
}

func TestWithVersionRejectsUnreleased(t *testing.T) {
	reg := newFakeRegistry(t)
	latest := Versions(order.TopicOrderCreated)
	for _, c := range []struct {
		topic string
		n     int
		want  string
	}{
		{order.TopicOrderCreated, 0, "not a released version"},
		{order.TopicOrderCreated, -1, "not a released version"},
		{order.TopicOrderCreated, latest + 1, "v1 to v" + strconv.Itoa(latest)},
		{"nope", 1, "unknown topic"},
	} {
		_, err := New(context.Background(), reg.client, WithVersion(c.topic, c.n))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("WithVersion(%q, %d): %v, want an error containing %q", c.topic, c.n, err, c.want)
		}
		if c.topic == "nope" && !errors.Is(err, ErrUnknownTopic) {
			t.Errorf("WithVersion(nope): %v, want ErrUnknownTopic", err)
		}
	}
	// The newest version is the current schema: same id, same text.
	cur, err := New(context.Background(), reg.client)
	if err != nil {
		t.Fatal(err)
	}
	same, err := New(context.Background(), reg.client, WithVersion(order.TopicOrderCreated, latest))
	if err != nil {
		t.Fatal(err)
	}
	if mustID(t, same, order.TopicOrderCreated) != mustID(t, cur, order.TopicOrderCreated) ||
		same.SchemaText(order.TopicOrderCreated) != AvroSchemaText(order.TopicOrderCreated) ||
		same.SchemaVersion(order.TopicOrderCreated) != latest {
		t.Errorf("WithVersion(latest) differs from the default")
	}
}

// An instance pinned to orderCreated v1 behaves as a build that only knew
// v1, side by side with a current one on the same registry: each writes its
// own schema id, each reads the other's records, the v1 one without channel.
func TestWithVersionActsAsOldBuild(t *testing.T) {
	reg := newFakeRegistry(t)
	ctx := context.Background()
	old, err := New(ctx, reg.client, WithVersion(order.TopicOrderCreated, 1))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := New(ctx, reg.client)
	if err != nil {
		t.Fatal(err)
	}
	const topic = order.TopicOrderCreated
	oldID, curID := mustID(t, old, topic), mustID(t, cur, topic)
	if oldID == curID {
		t.Fatalf("v1 and v2 share schema id %d", oldID)
	}
	v1, _ := os.ReadFile(filepath.Join("avro", "history", "orderCreated.v1.avsc"))
	if old.SchemaText(topic) != string(v1) || old.SchemaVersion(topic) != 1 || cur.SchemaVersion(topic) != 2 {
		t.Fatalf("pinned serde: version %d, text of v1 %v", old.SchemaVersion(topic), old.SchemaText(topic) == string(v1))
	}
	// Other topics are not pinned.
	if mustID(t, old, order.TopicPaymentProcessed) != mustID(t, cur, order.TopicPaymentProcessed) {
		t.Errorf("paymentProcessed pinned too")
	}

	ev := sampleOrder(2) // Channel "web"
	noChannel := ev
	noChannel.Channel = ""

	// The old instance writes exactly what the v1 build wrote: v1's id and
	// the v1 body, without channel.
	b, err := old.Encode(topic, &ev)
	if err != nil {
		t.Fatal(err)
	}
	if id := int(binary.BigEndian.Uint32(b[1:5])); id != oldID {
		t.Fatalf("pinned Encode wrote schema id %d, want v1's %d", id, oldID)
	}
	v1Schema := avro.MustParse(string(v1))
	var w1 wireOrderCreatedV1
	if err := avroAPI.Unmarshal(v1Schema, b[5:], &w1); err != nil {
		t.Fatalf("pinned Encode body is not v1 Avro: %v", err)
	}
	ref, cust, country := noChannel.Reference, noChannel.CustomerID, noChannel.Country
	want1, err := avroAPI.Marshal(v1Schema, &wireOrderCreatedV1{EventID: ev.EventID, OrderID: ev.OrderID, CustomerID: &cust,
		Country: &country, Lines: ev.Lines, TotalMilli: ev.Total, CreatedAt: ev.CreatedAt, Reference: &ref})
	if err != nil {
		t.Fatal(err)
	}
	if string(b[5:]) != string(want1) {
		t.Fatalf("pinned Encode body differs from a v1 build's")
	}
	for name, s := range map[string]*Serde{"old": old, "current": cur} {
		var got order.OrderCreated
		if _, err := s.Decode(topic, b, &got); err != nil {
			t.Fatalf("%s reader, v1 record: %v", name, err)
		}
		if !reflect.DeepEqual(got, noChannel) {
			t.Fatalf("%s reader, v1 record:\n got %#v\nwant %#v", name, got, noChannel)
		}
	}

	// The current instance writes v2 with channel; the old one reads it
	// without failing and without channel, as v1 did.
	b2, err := cur.Encode(topic, &ev)
	if err != nil {
		t.Fatal(err)
	}
	if id := int(binary.BigEndian.Uint32(b2[1:5])); id != curID {
		t.Fatalf("current Encode wrote schema id %d, want %d", id, curID)
	}
	var gotOld, gotCur order.OrderCreated
	if _, err := old.Decode(topic, b2, &gotOld); err != nil {
		t.Fatalf("old reader, v2 record: %v", err)
	}
	if !reflect.DeepEqual(gotOld, noChannel) {
		t.Fatalf("old reader, v2 record:\n got %#v\nwant %#v", gotOld, noChannel)
	}
	if _, err := cur.Decode(topic, b2, &gotCur); err != nil || !reflect.DeepEqual(gotCur, ev) {
		t.Fatalf("current reader, v2 record: %v\n got %#v\nwant %#v", err, gotCur, ev)
	}

	// JSON: the old instance ignores channel, whatever its spelling or type,
	// as v1's structs did; the current one reads or validates it.
	j, _ := json.Marshal(ev)
	for _, c := range []struct {
		name      string
		edit      func(m map[string]any)
		cur       string // channel the current reader decodes; "!" = ErrInvalid
		oldReader string
	}{
		{"channel", func(map[string]any) {}, "web", ""},
		{"Channel spelled differently", func(m map[string]any) { delete(m, "channel"); m["Channel"] = "api" }, "api", ""},
		{"channel not a string", func(m map[string]any) { m["channel"] = 5 }, "!", ""},
	} {
		t.Run("json "+c.name, func(t *testing.T) {
			var m map[string]any
			_ = json.Unmarshal(j, &m)
			c.edit(m)
			payload, _ := json.Marshal(m)
			var o, n order.OrderCreated
			if _, err := old.Decode(topic, payload, &o); err != nil || o.Channel != c.oldReader || o.OrderID != ev.OrderID {
				t.Fatalf("old reader: %v, channel %q", err, o.Channel)
			}
			_, err := cur.Decode(topic, payload, &n)
			if c.cur == "!" {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("current reader: %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil || n.Channel != c.cur {
				t.Fatalf("current reader: %v, channel %q, want %q", err, n.Channel, c.cur)
			}
		})
	}
}

// A producer pinned with WithWriterVersion writes exactly what the v1 build
// wrote (v1's id and body) but reads every record with the current schema:
// a v2 record keeps its channel, which WithVersion would drop.
func TestWithWriterVersionWritesOldReadsNew(t *testing.T) {
	reg := newFakeRegistry(t)
	ctx := context.Background()
	const topic = order.TopicOrderCreated
	pinned, err := New(ctx, reg.client, WithWriterVersion(topic, 1))
	if err != nil {
		t.Fatal(err)
	}
	old, err := New(ctx, reg.client, WithVersion(topic, 1))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := New(ctx, reg.client)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mustID(t, pinned, topic), mustID(t, old, topic); got != want {
		t.Fatalf("writer-pinned schema id %d, want v1's %d", got, want)
	}
	// What each writes: the field v2 added is not in a v1 writer.
	for _, c := range []struct {
		s           *Serde
		topic, name string
		want        bool
	}{{cur, topic, "channel", true}, {pinned, topic, "channel", false}, {old, topic, "channel", false},
		{pinned, topic, "eventId", true}, {cur, order.TopicPaymentProcessed, "channel", false}, {cur, "nope", "eventId", false}} {
		if got := c.s.WritesField(c.topic, c.name); got != c.want {
			t.Errorf("WritesField(%s, %s) = %v, want %v (writer v%d)", c.topic, c.name, got, c.want, c.s.SchemaVersion(c.topic))
		}
	}
	v1, _ := os.ReadFile(filepath.Join("avro", "history", "orderCreated.v1.avsc"))
	if pinned.SchemaText(topic) != string(v1) || pinned.SchemaVersion(topic) != 1 || pinned.ReaderVersion(topic) != 2 ||
		old.ReaderVersion(topic) != 1 || cur.ReaderVersion(topic) != 2 {
		t.Fatalf("writer-pinned: SchemaVersion %d, ReaderVersion %d, text of v1 %v; WithVersion ReaderVersion %d",
			pinned.SchemaVersion(topic), pinned.ReaderVersion(topic), pinned.SchemaText(topic) == string(v1), old.ReaderVersion(topic))
	}

	ev := sampleOrder(2) // Channel "web"
	noChannel := ev
	noChannel.Channel = ""

	b1, err := pinned.Encode(topic, &ev)
	if err != nil {
		t.Fatal(err)
	}
	bOld, err := old.Encode(topic, &ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(b1) != string(bOld) {
		t.Fatalf("writer-pinned Encode differs from WithVersion's (the v1 build's)")
	}
	b2, err := cur.Encode(topic, &ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want order.OrderCreated
	}{
		{"own v1 record", b1, noChannel},
		{"v2 record", b2, ev},
	} {
		var got order.OrderCreated
		if _, err := pinned.Decode(topic, c.b, &got); err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("writer-pinned reader, %s: %v\n got %#v\nwant %#v", c.name, err, got, c.want)
		}
	}
	j, _ := json.Marshal(ev)
	var gotJ order.OrderCreated
	if _, err := pinned.Decode(topic, j, &gotJ); err != nil || gotJ.Channel != "web" {
		t.Errorf("writer-pinned reader, JSON with channel: %v, channel %q", err, gotJ.Channel)
	}
	// Other topics are not pinned.
	if mustID(t, pinned, order.TopicPaymentProcessed) != mustID(t, cur, order.TopicPaymentProcessed) {
		t.Errorf("paymentProcessed pinned too")
	}
}

func TestWithWriterVersionErrors(t *testing.T) {
	reg := newFakeRegistry(t)
	latest := Versions(order.TopicOrderCreated)
	for _, c := range []struct {
		name string
		opts []Opt
		want string
		is   error
	}{
		{"zero", []Opt{WithWriterVersion(order.TopicOrderCreated, 0)}, "WithWriterVersion(\"orderCreated\", 0): not a released version", nil},
		{"unreleased", []Opt{WithWriterVersion(order.TopicOrderCreated, latest+1)}, "v1 to v" + strconv.Itoa(latest), nil},
		{"unknown topic", []Opt{WithWriterVersion("nope", 1)}, "unknown topic", ErrUnknownTopic},
		{"both options", []Opt{WithVersion(order.TopicOrderCreated, 1), WithWriterVersion(order.TopicOrderCreated, 1)}, "name the same topic", nil},
	} {
		_, err := New(context.Background(), reg.client, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	// Different topics combine; the newest version changes nothing.
	s, err := New(context.Background(), reg.client, WithVersion(order.TopicPaymentProcessed, 1), WithWriterVersion(order.TopicOrderCreated, latest))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := New(context.Background(), reg.client)
	if err != nil {
		t.Fatal(err)
	}
	if mustID(t, s, order.TopicOrderCreated) != mustID(t, cur, order.TopicOrderCreated) || s.SchemaVersion(order.TopicOrderCreated) != latest {
		t.Errorf("WithWriterVersion(latest) differs from the default")
	}
}

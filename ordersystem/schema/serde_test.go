package schema

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/order"
)

func TestNewRegistersIdempotently(t *testing.T) {
	s1, reg := newTestSerde(t)
	s2, err := New(context.Background(), reg.client)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"orderCreated-value", "paymentProcessed-value", "shipmentRequested-value"}
	if got := s1.Subjects(); !slices.Equal(got, want) {
		t.Fatalf("Subjects() = %v, want %v", got, want)
	}
	ids := map[int]bool{}
	for _, topic := range Topics() {
		id1, ok1 := s1.SchemaID(topic)
		id2, ok2 := s2.SchemaID(topic)
		if !ok1 || !ok2 || id1 != id2 || id1 <= 0 {
			t.Fatalf("%s: ids %d/%v and %d/%v, want the same positive id", topic, id1, ok1, id2, ok2)
		}
		ids[id1] = true
		if s1.SchemaText(topic) != AvroSchemaText(topic) || !strings.Contains(s1.SchemaText(topic), `"io.ordercast.events"`) {
			t.Fatalf("%s: SchemaText does not match the embedded .avsc", topic)
		}
		versions, err := reg.client.SubjectVersions(context.Background(), SubjectFor(topic))
		if err != nil || len(versions) != 1 {
			t.Fatalf("%s: versions %v, %v; want exactly one", topic, versions, err)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("want 3 distinct schema ids, got %v", ids)
	}
	if s1.SchemaText("nope") != "" {
		t.Fatal("SchemaText of an unknown topic must be empty")
	}
	if _, ok := s1.SchemaID("nope"); ok {
		t.Fatal("SchemaID of an unknown topic must report false")
	}
}

func TestNewLookupOnly(t *testing.T) {
	reg := newFakeRegistry(t)
	if _, err := New(context.Background(), reg.client, WithLookupOnly()); err == nil {
		t.Fatal("lookup-only New on an empty registry must fail")
	}
	s1, err := New(context.Background(), reg.client)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := New(context.Background(), reg.client, WithLookupOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range Topics() {
		a, _ := s1.SchemaID(topic)
		b, _ := s2.SchemaID(topic)
		if a != b {
			t.Fatalf("%s: registered id %d, looked-up id %d", topic, a, b)
		}
	}
	if _, err := New(context.Background(), nil); err == nil {
		t.Fatal("New(nil client) must fail")
	}
}

func TestAvroRoundTrip(t *testing.T) {
	s, _ := newTestSerde(t)
	cases := []struct {
		topic string
		v     any
	}{
		{order.TopicOrderCreated, sampleOrder(3)},
		{order.TopicOrderCreated, guestOrder()},
		{order.TopicPaymentProcessed, samplePayment()},
		{order.TopicPaymentProcessed, refusedGuestPayment()},
		{order.TopicShipmentRequested, sampleShipment()},
		{order.TopicShipmentRequested, func() order.ShipmentRequested { e := sampleShipment(); e.CustomerID = ""; return e }()},
	}
	for _, c := range cases {
		for _, byPointer := range []bool{false, true} {
			in := c.v
			if byPointer {
				p := reflect.New(reflect.TypeOf(c.v))
				p.Elem().Set(reflect.ValueOf(c.v))
				in = p.Interface()
			}
			b, err := s.Encode(c.topic, in)
			if err != nil {
				t.Fatalf("%s: Encode: %v", c.topic, err)
			}
			id, _ := s.SchemaID(c.topic)
			if b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != id {
				t.Fatalf("%s: header % x, want 00 + id %d", c.topic, b[:5], id)
			}
			out := newTarget(c.topic)
			f, err := s.Decode(c.topic, b, out)
			if err != nil || f != FormatAvro {
				t.Fatalf("%s: Decode = %v, %v", c.topic, f, err)
			}
			if got := reflect.ValueOf(out).Elem().Interface(); !reflect.DeepEqual(got, c.v) {
				t.Fatalf("%s: round trip\n got %#v\nwant %#v", c.topic, got, c.v)
			}
		}
	}
}

func TestAvroOptionalFieldsAreNullWhenEmpty(t *testing.T) {
	s, _ := newTestSerde(t)
	b, err := s.Encode(order.TopicOrderCreated, guestOrder())
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := avro.Unmarshal(contracts[order.TopicOrderCreated].avro, b[5:], &generic); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"customerId", "country", "reference", "channel"} {
		if v, ok := generic[f]; !ok || v != nil {
			t.Errorf("%s = %#v, want null", f, v)
		}
	}
}

func TestJSONAccepted(t *testing.T) {
	s, _ := newTestSerde(t)
	for topic, v := range map[string]any{
		order.TopicOrderCreated:      sampleOrder(2),
		order.TopicPaymentProcessed:  refusedGuestPayment(),
		order.TopicShipmentRequested: sampleShipment(),
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out := newTarget(topic)
		f, err := s.Decode(topic, append([]byte(" \n"), b...), out)
		if err != nil || f != FormatJSON {
			t.Fatalf("%s: Decode = %v, %v", topic, f, err)
		}
		if got := reflect.ValueOf(out).Elem().Interface(); !reflect.DeepEqual(got, v) {
			t.Fatalf("%s: JSON round trip\n got %#v\nwant %#v", topic, got, v)
		}
	}

	// What a kafkajs producer sends: null for a guest, toISOString() times,
	// and a field this build does not know yet.
	node := `{"eventId":"e1","orderId":"o1","customerId":null,"lines":[{"stockCode":"22423",
	"description":"REGENCY CAKESTAND 3 TIER","quantity":2,"unitPriceMilli":12750,"lineTotalMilli":25500}],
	"totalMilli":25500,"createdAt":"2024-05-01T10:11:12.345Z","giftWrap":true}`
	var o order.OrderCreated
	f, err := s.Decode(order.TopicOrderCreated, []byte(node), &o)
	if err != nil || f != FormatJSON {
		t.Fatalf("node payload: %v, %v", f, err)
	}
	if o.CustomerID != "" || !o.Guest() || o.Total != 25500 || o.CreatedAt.UnixMilli() != 1714558272345 {
		t.Fatalf("node payload decoded as %+v", o)
	}
}

func TestJSONInvalid(t *testing.T) {
	s, _ := newTestSerde(t)
	base, _ := json.Marshal(sampleOrder(2))
	edit := func(fn func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		fn(m)
		b, _ := json.Marshal(m)
		return b
	}
	line0 := func(m map[string]any) map[string]any { return m["lines"].([]any)[0].(map[string]any) }
	cases := []struct {
		name, topic, field string
		payload            []byte
	}{
		{"missing orderId", order.TopicOrderCreated, "orderId", edit(func(m map[string]any) { delete(m, "orderId") })},
		{"missing eventId", order.TopicOrderCreated, "eventId", edit(func(m map[string]any) { delete(m, "eventId") })},
		{"missing line quantity", order.TopicOrderCreated, "lines[0].quantity", edit(func(m map[string]any) { delete(line0(m), "quantity") })},
		{"fractional quantity", order.TopicOrderCreated, "lines[0].quantity", edit(func(m map[string]any) { line0(m)["quantity"] = 1.5 })},
		{"string money", order.TopicOrderCreated, "totalMilli", edit(func(m map[string]any) { m["totalMilli"] = "15.300" })},
		{"null lines", order.TopicOrderCreated, "lines", edit(func(m map[string]any) { m["lines"] = nil })},
		{"bad time", order.TopicOrderCreated, "createdAt", edit(func(m map[string]any) { m["createdAt"] = "yesterday" })},
		{"customerId number", order.TopicOrderCreated, "customerId", edit(func(m map[string]any) { m["customerId"] = 17850 })},
		{"no lines (rule)", order.TopicOrderCreated, "lines", edit(func(m map[string]any) { m["lines"] = []any{} })},
		{"total mismatch (rule)", order.TopicOrderCreated, "totalMilli", edit(func(m map[string]any) { m["totalMilli"] = 1 })},
		{"bad channel (rule)", order.TopicOrderCreated, "channel", edit(func(m map[string]any) { m["channel"] = "BAD CHANNEL!" })},
		{"unknown status", order.TopicPaymentProcessed, "status",
			[]byte(`{"eventId":"e","orderId":"o","status":"PENDING","method":"CARD","amountMilli":1,"processedAt":"2024-05-01T10:11:12Z"}`)},
		{"missing processedAt", order.TopicPaymentProcessed, "processedAt",
			[]byte(`{"eventId":"e","orderId":"o","status":"PAID","method":"CARD","amountMilli":1}`)},
		{"empty shipmentId (rule)", order.TopicShipmentRequested, "shipmentId",
			[]byte(`{"eventId":"e","shipmentId":"","orderId":"o","requestedAt":"2024-05-01T10:11:12Z"}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := s.Decode(c.topic, c.payload, newTarget(c.topic))
			var se *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &se) || f != FormatJSON {
				t.Fatalf("Decode = %v, %v; want FormatJSON and ErrInvalid", f, err)
			}
			if se.Field != c.field || !strings.Contains(err.Error(), c.field) || se.Class() != "invalid" || !IsDecodeError(err) {
				t.Fatalf("error %q: field %q class %q, want field %q class invalid", err, se.Field, se.Class(), c.field)
			}
		})
	}
}

func TestUndecodable(t *testing.T) {
	s, _ := newTestSerde(t)
	valid, err := s.Encode(order.TopicOrderCreated, sampleOrder(2))
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 64)
	for i := range random {
		random[i] = byte(rnd.UintN(256))
	}
	random[0] = 0x9c // not magic 0, not '{'
	cases := map[string][]byte{
		"nil":               nil,
		"empty":             {},
		"spaces":            []byte("   \n"),
		"random":            random,
		"bad magic":         append([]byte{1}, valid[1:]...),
		"short header":      {0, 0, 0},
		"header only":       valid[:5],
		"truncated body":    valid[:len(valid)-3],
		"trailing bytes":    append(bytes.Clone(valid), 0, 0),
		"malformed json":    []byte(`{"eventId":`),
		"json trailing":     []byte(`{"eventId":"e"} {}`),
		"json array":        []byte(`[1,2]`),
		"text":              []byte("hello"),
		"huge array length": wire(mustID(t, s, order.TopicOrderCreated), []byte{2, 'e', 2, 'o', 0, 0, 0xfe, 0xff, 0xff, 0xff, 0x0f}),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			var o order.OrderCreated
			_, err := s.Decode(order.TopicOrderCreated, b, &o)
			if !errors.Is(err, ErrUndecodable) || !IsDecodeError(err) || ErrorClass(err) != ClassUndecodable {
				t.Fatalf("Decode(% x) = %v, want ErrUndecodable", b, err)
			}
			if !reflect.DeepEqual(o, order.OrderCreated{}) {
				t.Fatalf("target written on failure: %+v", o)
			}
		})
	}
}

func mustID(t testing.TB, s *Serde, topic string) int {
	t.Helper()
	id, ok := s.SchemaID(topic)
	if !ok {
		t.Fatalf("no id for %s", topic)
	}
	return id
}

func TestUnknownSchemaID(t *testing.T) {
	s, reg := newTestSerde(t)
	valid, _ := s.Encode(order.TopicOrderCreated, sampleOrder(1))
	b := wire(4242, valid[5:])
	_, err := s.Decode(order.TopicOrderCreated, b, new(order.OrderCreated))
	var se *Error
	if !errors.Is(err, ErrUnknownSchemaID) || !errors.As(err, &se) || se.SchemaID != 4242 ||
		se.Class() != ClassUnknownSchemaID || !IsDecodeError(err) {
		t.Fatalf("Decode = %v, want ErrUnknownSchemaID for id 4242", err)
	}

	// Negatively cached: a burst of such records does not hit the registry.
	n := reg.lookups.Load()
	for range 10 {
		_, err = s.Decode(order.TopicOrderCreated, b, new(order.OrderCreated))
		if !errors.Is(err, ErrUnknownSchemaID) {
			t.Fatal(err)
		}
	}
	if got := reg.lookups.Load(); got != n {
		t.Fatalf("%d registry lookups for a cached unknown id", got-n)
	}
	// The negative cache is bounded: a flood of random ids cannot grow it.
	for i := range maxNegatives + 100 {
		_, _ = s.Decode(order.TopicOrderCreated, wire(100_000+i, valid[5:]), new(order.OrderCreated))
	}
	s.mu.Lock()
	size := len(s.negatives)
	s.mu.Unlock()
	if size > maxNegatives {
		t.Fatalf("negative cache holds %d entries, bound is %d", size, maxNegatives)
	}
	n = reg.lookups.Load()

	// After the TTL it asks again.
	s.now = func() time.Time { return time.Now().Add(time.Hour) }
	_, _ = s.Decode(order.TopicOrderCreated, b, new(order.OrderCreated))
	if reg.lookups.Load() == n {
		t.Fatal("expired negative cache entry was not looked up again")
	}
}

func TestWrongSubject(t *testing.T) {
	s, reg := newTestSerde(t)
	pay, err := s.Encode(order.TopicPaymentProcessed, samplePayment())
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Decode(order.TopicOrderCreated, pay, new(order.OrderCreated))
	if !errors.Is(err, ErrWrongSubject) || ErrorClass(err) != ClassWrongSubject || !IsDecodeError(err) {
		t.Fatalf("payment record decoded as orderCreated: %v, want ErrWrongSubject", err)
	}

	// An id from a subject this package does not know at all.
	other, err := reg.client.CreateSchema(context.Background(), "somethingElse-value",
		sr.Schema{Schema: `{"type":"record","name":"X","fields":[{"name":"a","type":"long"}]}`})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Decode(order.TopicShipmentRequested, wire(other.ID, []byte{2}), new(order.ShipmentRequested))
	if !errors.Is(err, ErrWrongSubject) {
		t.Fatalf("Decode = %v, want ErrWrongSubject", err)
	}
}

func TestEncodeInvalid(t *testing.T) {
	s, _ := newTestSerde(t)
	mod := func(fn func(*order.OrderCreated)) order.OrderCreated { o := sampleOrder(2); fn(&o); return o }
	pay := func(fn func(*order.PaymentProcessed)) order.PaymentProcessed { p := samplePayment(); fn(&p); return p }
	cases := []struct {
		name, topic, field string
		v                  any
	}{
		{"empty orderId", order.TopicOrderCreated, "orderId", mod(func(o *order.OrderCreated) { o.OrderID = "" })},
		{"empty eventId", order.TopicOrderCreated, "eventId", mod(func(o *order.OrderCreated) { o.EventID = "" })},
		{"no lines", order.TopicOrderCreated, "lines", mod(func(o *order.OrderCreated) { o.Lines = nil; o.Total = 0 })},
		{"zero quantity", order.TopicOrderCreated, "lines[1].quantity", mod(func(o *order.OrderCreated) { o.Lines[1].Quantity = 0 })},
		{"negative price", order.TopicOrderCreated, "lines[0].unitPriceMilli", mod(func(o *order.OrderCreated) { o.Lines[0].UnitPrice = -1 })},
		{"wrong line total", order.TopicOrderCreated, "lines[0].lineTotalMilli", mod(func(o *order.OrderCreated) { o.Lines[0].LineTotal++ })},
		{"wrong total", order.TopicOrderCreated, "totalMilli", mod(func(o *order.OrderCreated) { o.Total++ })},
		{"no createdAt", order.TopicOrderCreated, "createdAt", mod(func(o *order.OrderCreated) { o.CreatedAt = time.Time{} })},
		{"bad channel", order.TopicOrderCreated, "channel", mod(func(o *order.OrderCreated) { o.Channel = "BAD CHANNEL!" })},
		{"channel too long", order.TopicOrderCreated, "channel", mod(func(o *order.OrderCreated) { o.Channel = strings.Repeat("a", order.MaxChannelLen+1) })},
		{"status PENDING", order.TopicPaymentProcessed, "status", pay(func(p *order.PaymentProcessed) { p.Status = "PENDING" })},
		{"status lower case", order.TopicPaymentProcessed, "status", pay(func(p *order.PaymentProcessed) { p.Status = "paid" })},
		{"method empty", order.TopicPaymentProcessed, "method", pay(func(p *order.PaymentProcessed) { p.Method = "" })},
		{"refused without reason", order.TopicPaymentProcessed, "reason", pay(func(p *order.PaymentProcessed) { p.Status = order.PaymentRefused })},
		{"negative amount", order.TopicPaymentProcessed, "amountMilli", pay(func(p *order.PaymentProcessed) { p.Amount = -5 })},
		{"shipment without id", order.TopicShipmentRequested, "shipmentId", order.ShipmentRequested{EventID: "e", OrderID: "o", RequestedAt: at}},
		{"shipment without time", order.TopicShipmentRequested, "requestedAt", order.ShipmentRequested{EventID: "e", ShipmentID: "s", OrderID: "o"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := s.Encode(c.topic, c.v)
			var se *Error
			if b != nil || !errors.Is(err, ErrInvalid) || !errors.As(err, &se) || se.Field != c.field {
				t.Fatalf("Encode = %d bytes, %v; want nil and ErrInvalid on %q", len(b), err, c.field)
			}
			if verr := Validate(c.topic, c.v); !errors.Is(verr, ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", verr)
			}
		})
	}
}

func TestWrongTopicOrType(t *testing.T) {
	s, _ := newTestSerde(t)
	if _, err := s.Encode("nope", sampleOrder(1)); !errors.Is(err, ErrUnknownTopic) || ErrorClass(err) != ClassUnknownTopic {
		t.Fatalf("Encode unknown topic: %v", err)
	}
	if _, err := s.Encode(order.TopicOrderCreated, samplePayment()); !errors.Is(err, ErrUnsupportedType) {
		t.Fatalf("Encode wrong type: %v", err)
	}
	if _, err := s.Encode(order.TopicOrderCreated, (*order.OrderCreated)(nil)); !errors.Is(err, ErrUnsupportedType) {
		t.Fatalf("Encode nil pointer: %v", err)
	}
	valid, _ := s.Encode(order.TopicOrderCreated, sampleOrder(1))
	for name, target := range map[string]any{
		"value":         order.OrderCreated{},
		"nil pointer":   (*order.OrderCreated)(nil),
		"other type":    new(order.PaymentProcessed),
		"untyped nil":   nil,
		"pointer to pt": new(*order.OrderCreated),
	} {
		if _, err := s.Decode(order.TopicOrderCreated, valid, target); !errors.Is(err, ErrUnsupportedType) || !IsDecodeError(err) {
			t.Fatalf("Decode into %s: %v, want ErrUnsupportedType", name, err)
		}
	}
	if _, err := s.Decode("nope", valid, new(order.OrderCreated)); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("Decode unknown topic: %v", err)
	}
	if err := Validate("nope", nil); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("Validate unknown topic: %v", err)
	}
}

// A foreign producer writing a structurally valid record that breaks a rule
// is caught when consumed, with the schema id in the error.
func TestDecodeAppliesRules(t *testing.T) {
	s, _ := newTestSerde(t)
	e := samplePayment()
	e.OrderID = ""
	var w wirePaymentProcessed
	paymentToWire(&e, &w)
	body, err := avroAPI.Marshal(contracts[order.TopicPaymentProcessed].avro, &w)
	if err != nil {
		t.Fatal(err)
	}
	id := mustID(t, s, order.TopicPaymentProcessed)
	var got order.PaymentProcessed
	_, err = s.Decode(order.TopicPaymentProcessed, wire(id, body), &got)
	var se *Error
	if !errors.As(err, &se) || !errors.Is(err, ErrInvalid) || se.Field != "orderId" || se.SchemaID != id {
		t.Fatalf("Decode = %v, want ErrInvalid on orderId with schema id %d", err, id)
	}
	if got != (order.PaymentProcessed{}) {
		t.Fatalf("target written although the event is invalid: %+v", got)
	}
	j, _ := json.Marshal(e)
	if _, err := s.Decode(order.TopicPaymentProcessed, j, &got); !errors.Is(err, ErrInvalid) || got != (order.PaymentProcessed{}) {
		t.Fatalf("JSON: %v, target %+v; want ErrInvalid and the target untouched", err, got)
	}
}

// An Avro orderCreated from a foreign producer with a channel checkout would
// refuse is invalid when consumed (class invalid, the DLQ), as checkout's
// rule (order.ValidChannel) says; a valid channel decodes.
func TestDecodeRefusesBadChannel(t *testing.T) {
	s, _ := newTestSerde(t)
	id := mustID(t, s, order.TopicOrderCreated)
	for ch, ok := range map[string]bool{"web": true, "replay_2": true, "BAD CHANNEL!": false, "9web": false, "Web": false} {
		e := sampleOrder(1)
		e.Channel = ch
		var w wireOrderCreated
		orderCreatedToWire(&e, &w)
		body, err := avroAPI.Marshal(contracts[order.TopicOrderCreated].avro, &w)
		if err != nil {
			t.Fatal(err)
		}
		var got order.OrderCreated
		_, err = s.Decode(order.TopicOrderCreated, wire(id, body), &got)
		if ok {
			if err != nil || got.Channel != ch {
				t.Errorf("channel %q: %v, channel %q", ch, err, got.Channel)
			}
			continue
		}
		var se *Error
		if !errors.As(err, &se) || se.Field != "channel" || se.Class() != ClassInvalid || !strings.Contains(err.Error(), ch) {
			t.Errorf("channel %q: Decode = %v, want class invalid on field channel naming it", ch, err)
		}
	}
}

// Schema evolution: records written with a later (or earlier) version of the
// schema registered under the subject decode through Avro resolution.
func TestDecodeResolvesWriterSchema(t *testing.T) {
	s, reg := newTestSerde(t)
	// A version as a future producer might write it: a new optional field
	// "promo" and no "reference" (removed; the reader's default applies).
	next := strings.Replace(AvroSchemaText(order.TopicOrderCreated),
		`{"name": "reference", "type": ["null", "string"], "default": null, "doc": "Caller's own reference (the replay sets the invoice number); informational."}`,
		`{"name": "promo", "type": ["null", "string"], "default": null}`, 1)
	if next == AvroSchemaText(order.TopicOrderCreated) {
		t.Fatal("test schema edit did not apply")
	}
	ss, err := reg.client.CreateSchema(context.Background(), SubjectFor(order.TopicOrderCreated), sr.Schema{Schema: next})
	if err != nil {
		t.Fatal(err)
	}
	if ss.ID == mustID(t, s, order.TopicOrderCreated) {
		t.Fatal("the next version got the current id")
	}
	writer := avro.MustParse(next)
	type wireNext struct {
		EventID    string       `json:"eventId"`
		OrderID    string       `json:"orderId"`
		CustomerID *string      `json:"customerId"`
		Country    *string      `json:"country"`
		Lines      []order.Line `json:"lines"`
		TotalMilli order.Money  `json:"totalMilli"`
		CreatedAt  time.Time    `json:"createdAt"`
		Channel    *string      `json:"channel"`
		Promo      *string      `json:"promo"`
	}
	want := sampleOrder(2)
	promo := "xmas"
	body, err := avroAPI.Marshal(writer, &wireNext{
		EventID: want.EventID, OrderID: want.OrderID, CustomerID: &want.CustomerID, Country: &want.Country,
		Lines: want.Lines, TotalMilli: want.Total, CreatedAt: want.CreatedAt, Channel: &want.Channel, Promo: &promo,
	})
	if err != nil {
		t.Fatal(err)
	}
	want.Reference = "" // absent in the writer's version: the reader's default (null)
	var got order.OrderCreated
	if _, err := s.Decode(order.TopicOrderCreated, wire(ss.ID, body), &got); err != nil {
		t.Fatalf("Decode next-version record: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("next-version record\n got %#v\nwant %#v", got, want)
	}

	// A writer schema that this build cannot read: totalMilli became a string.
	if err := reg.SetCompat(SubjectFor(order.TopicOrderCreated), sr.CompatNone); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(AvroSchemaText(order.TopicOrderCreated), `{"name": "totalMilli", "type": "long"`, `{"name": "totalMilli", "type": "string"`, 1)
	bs, err := reg.client.CreateSchema(context.Background(), SubjectFor(order.TopicOrderCreated), sr.Schema{Schema: bad})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Decode(order.TopicOrderCreated, wire(bs.ID, body), new(order.OrderCreated))
	if !errors.Is(err, ErrIncompatibleSchema) || ErrorClass(err) != ClassIncompatibleSchema || !IsDecodeError(err) {
		t.Fatalf("Decode with incompatible writer: %v, want ErrIncompatibleSchema", err)
	}
}

func TestRegistryUnavailableIsTransient(t *testing.T) {
	s, reg := newTestSerde(t, WithLookupTimeout(2*time.Second))
	valid, _ := s.Encode(order.TopicOrderCreated, sampleOrder(1))
	unseen := wire(77, valid[5:])

	reg.down.Store(true)
	_, err := s.Decode(order.TopicOrderCreated, unseen, new(order.OrderCreated))
	if !errors.Is(err, ErrRegistryUnavailable) || IsDecodeError(err) || ErrorClass(err) != "" {
		t.Fatalf("Decode with registry down: %v, want transient ErrRegistryUnavailable", err)
	}
	// Known ids need no registry.
	if _, err := s.Decode(order.TopicOrderCreated, valid, new(order.OrderCreated)); err != nil {
		t.Fatalf("Decode of a cached id with registry down: %v", err)
	}
	// Not cached: once the registry is back the answer is the real one.
	reg.down.Store(false)
	if _, err := s.Decode(order.TopicOrderCreated, unseen, new(order.OrderCreated)); !errors.Is(err, ErrUnknownSchemaID) {
		t.Fatalf("after recovery: %v, want ErrUnknownSchemaID", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.DecodeContext(ctx, order.TopicOrderCreated, wire(78, valid[5:]), new(order.OrderCreated)); err == nil || IsDecodeError(err) {
		t.Fatalf("Decode with a cancelled context: %v, want a transient error", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	s, reg := newTestSerde(t)
	// A writer version not yet seen by s: every goroutine needs it at once.
	v2 := strings.Replace(AvroSchemaText(order.TopicShipmentRequested), `"fields": [`,
		`"fields": [{"name": "carrier", "type": ["null", "string"], "default": null},`, 1)
	ss, err := reg.client.CreateSchema(context.Background(), SubjectFor(order.TopicShipmentRequested), sr.Schema{Schema: v2})
	if err != nil {
		t.Fatal(err)
	}
	var w wireShipmentRequested
	sh := sampleShipment()
	shipmentToWire(&sh, &w)
	// carrier is first and null: index 0 (one zero byte), then the v1 body.
	v1body, _ := avroAPI.Marshal(contracts[order.TopicShipmentRequested].avro, &w)
	v2rec := wire(ss.ID, append([]byte{0}, v1body...))
	before := reg.lookups.Load()

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				o := sampleOrder(1 + (g+i)%5)
				b, err := s.Encode(order.TopicOrderCreated, &o)
				if err != nil {
					t.Error(err)
					return
				}
				var got order.OrderCreated
				if _, err := s.Decode(order.TopicOrderCreated, b, &got); err != nil || !reflect.DeepEqual(got, o) {
					t.Errorf("decode: %v", err)
					return
				}
				var shp order.ShipmentRequested
				if _, err := s.Decode(order.TopicShipmentRequested, v2rec, &shp); err != nil || shp != sh {
					t.Errorf("decode v2 shipment: %v %+v", err, shp)
					return
				}
			}
		})
	}
	wg.Wait()
	// One schema lookup and one subjects lookup, whatever the concurrency.
	if n := reg.lookups.Load() - before; n != 2 {
		t.Fatalf("%d registry lookups for one new schema id, want 2", n)
	}
}

func TestErrorFormatting(t *testing.T) {
	err := newError(ErrInvalid, "orderCreated", 7, "lines[0].quantity", "must be > 0, is 0", nil)
	want := `schema: orderCreated: invalid event (schema id 7): field "lines[0].quantity": must be > 0, is 0`
	if err.Error() != want {
		t.Fatalf("got  %s\nwant %s", err, want)
	}
	wrapped := errors.Join(errors.New("handler"), err)
	if !IsDecodeError(wrapped) || ErrorClass(wrapped) != ClassInvalid || !errors.Is(wrapped, ErrInvalid) {
		t.Fatal("a wrapped *Error must still be recognised")
	}
	if IsDecodeError(nil) || IsDecodeError(errors.New("x")) || ErrorClass(nil) != "" {
		t.Fatal("non-*Error must not be a decode error")
	}
	for sentinel, class := range classOf {
		if got := newError(sentinel, "", 0, "", "", nil).Class(); got != class || class == "" {
			t.Fatalf("class of %v = %q", sentinel, got)
		}
	}
	if FormatAvro.String() != "avro" || FormatJSON.String() != "json" || FormatUnknown.String() != "unknown" {
		t.Fatal("Format.String")
	}
}

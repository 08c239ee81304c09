package schema

import (
	"encoding/json"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/order"
)

func BenchmarkEncodeOrderCreated10Lines(b *testing.B) {
	s, _ := newTestSerde(b)
	o := sampleOrder(10)
	enc, _ := s.Encode(order.TopicOrderCreated, &o)
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Encode(order.TopicOrderCreated, &o); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeOrderCreated10Lines(b *testing.B) {
	s, _ := newTestSerde(b)
	o := sampleOrder(10)
	enc, err := s.Encode(order.TopicOrderCreated, &o)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		var got order.OrderCreated
		if _, err := s.Decode(order.TopicOrderCreated, enc, &got); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeOrderCreated10LinesParallel(b *testing.B) {
	s, _ := newTestSerde(b)
	o := sampleOrder(10)
	enc, _ := s.Encode(order.TopicOrderCreated, &o)
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var got order.OrderCreated
			if _, err := s.Decode(order.TopicOrderCreated, enc, &got); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkDecodeJSONOrderCreated10Lines(b *testing.B) {
	s, _ := newTestSerde(b)
	enc, _ := json.Marshal(sampleOrder(10))
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		var got order.OrderCreated
		if _, err := s.Decode(order.TopicOrderCreated, enc, &got); err != nil {
			b.Fatal(err)
		}
	}
}

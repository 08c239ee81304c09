// Package schematest gives tests an in-memory schema registry (franz-go's
// srfake) and Serdes on it.
package schematest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/ordersystem/schema"
)

// Client starts an in-memory schema registry, closed at the end of the
// test, and returns a client of it.
func Client(t testing.TB) *sr.Client {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatalf("schema registry client: %v", err)
	}
	return cl
}

// Serde returns a schema.Serde on cl (a new in-memory registry when cl is
// nil) with opts, registering the order system's schemas; it fails the test
// when New fails or takes more than 20s.
func Serde(t testing.TB, cl *sr.Client, opts ...schema.Opt) *schema.Serde {
	t.Helper()
	if cl == nil {
		cl = Client(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := schema.New(ctx, cl, opts...)
	if err != nil {
		t.Fatalf("schema.New: %v", err)
	}
	return s
}

// Record returns a record of topic at offset off with key, its value ev
// encoded by s (s.Encode: the schema-registry wire format of topic's
// schema), as a consumer would receive it; it fails the test when Encode
// fails.
func Record(t testing.TB, s *schema.Serde, topic, key string, off int64, ev any) *kgo.Record {
	t.Helper()
	b, err := s.Encode(topic, ev)
	if err != nil {
		t.Fatalf("encode %s: %v", topic, err)
	}
	return &kgo.Record{Topic: topic, Offset: off, Key: []byte(key), Value: b}
}

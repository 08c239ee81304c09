// Package service holds what the order system's consumer services share: the
// decoding rule that turns a contract violation into a permanent failure (one
// record to the DLQ), and the inbox metadata of a record.
//
// The services themselves live in the sub-packages checkout, orders,
// payments, notifications and fulfillment.
//
// The batch handlers decode through the runtime's middleware.DecodeBatch
// (HandleBatch): a batch's decode error only sends its records to the
// one-record handler. The one-record handlers decode with Decode instead of
// middleware.Decode, which makes every decode error permanent (a registry
// outage would dead-letter records) and puts the record's coordinates in
// front of the message the DLQ record carries. The runtime already logs a
// failed handler call at WARN, and recovers a panic as a transient error,
// so middleware.Log and middleware.Recover would double the log lines and
// turn a panic's class from transient to permanent.
package service

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/inbox"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/processor"
)

// Decode decodes r's value into v (a pointer to the topic's event type) with
// serde. A payload that breaks the contract (undecodable bytes, unknown or
// foreign schema id, a JSON payload failing its schema, a null value or a
// tombstone) is returned as a permanent error, so the runtime sends that one
// record to the group's DLQ and moves on; a registry outage stays transient.
func Decode(ctx context.Context, serde *schema.Serde, r *kgo.Record, v any) error {
	if _, err := serde.DecodeContext(ctx, r.Topic, r.Value, v); err != nil {
		if schema.IsDecodeError(err) {
			return processor.Permanent(err)
		}
		return err
	}
	return nil
}

// Meta returns the inbox metadata of a record.
func Meta(r *kgo.Record) inbox.Meta {
	return inbox.Meta{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
}

// Millis converts t to Unix milliseconds, the time unit of every table.
func Millis(t time.Time) int64 { return t.UnixMilli() }

package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
	"github.com/ordercast/ordercast/processor/dlq"
)

// Payload is a record value decoded for people (dlq.Payload).
type Payload = dlq.Payload

// Decoder returns the order system's dlq.Decoder: DecodePayload with reg and
// serde (either may be nil). Safe for concurrent use when reg and serde
// are.
func Decoder(reg *sr.Client, serde *schema.Serde) dlq.Decoder {
	return dlq.DecoderFunc(func(ctx context.Context, topic string, value []byte) *Payload {
		return DecodePayload(ctx, reg, serde, topic, value)
	})
}

// DecodePayload decodes value, a record of topic, for display: what
// dlq.DecodeBytes does, and for the Confluent wire format the Avro body
// decoded with its writer schema from reg. reg may be nil (Avro bodies are
// then not decoded: the error says to pass --registry); serde may be nil
// (no contract check; else Contract says whether the value satisfies the
// contract of topic, one of the order system's event topics). It never
// fails: what could not be done is in Payload.Error. It calls the registry
// at most twice (schema by id, subjects by id), bounded by ctx.
func DecodePayload(ctx context.Context, reg *sr.Client, serde *schema.Serde, topic string, value []byte) *Payload {
	pl := dlq.DecodeBytes(value)
	if pl.Format == "avro" {
		if reg == nil {
			pl.Error = "Confluent wire format: pass --registry (or SCHEMA_REGISTRY_URL) to decode it"
		} else {
			pl.Decoded, pl.Subjects, pl.Error = decodeAvro(ctx, reg, pl.SchemaID, value[5:])
			if pl.Decoded != nil {
				pl.Hex = ""
			}
		}
	}
	if serde != nil && value != nil {
		if target := eventFor(topic); target != nil {
			if _, err := serde.DecodeContext(ctx, topic, value, target); err != nil {
				pl.Contract = err.Error()
			} else {
				pl.Contract = "ok"
			}
		}
	}
	return pl
}

// eventFor returns a decode target for a topic of the order system, or nil.
func eventFor(topic string) any {
	switch topic {
	case order.TopicOrderCreated:
		return new(order.OrderCreated)
	case order.TopicPaymentProcessed:
		return new(order.PaymentProcessed)
	case order.TopicShipmentRequested:
		return new(order.ShipmentRequested)
	}
	return nil
}

// decodeAvro decodes an Avro body with the writer schema of id, generically.
func decodeAvro(ctx context.Context, reg *sr.Client, id int, body []byte) (out json.RawMessage, subjects []string, reason string) {
	sch, err := reg.SchemaByID(ctx, id)
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.ErrorCode == sr.ErrSchemaNotFound.Code {
			return nil, nil, fmt.Sprintf("schema id %d is unknown to the registry", id)
		}
		return nil, nil, fmt.Sprintf("schema registry lookup of id %d failed (is --registry right?): %v", id, err)
	}
	subjects, _ = reg.SubjectsByID(ctx, id)
	if sch.Type != sr.TypeAvro {
		return nil, subjects, fmt.Sprintf("schema id %d is %s, not AVRO", id, sch.Type)
	}
	s, err := avro.ParseWithCache(sch.Schema, "", &avro.SchemaCache{})
	if err != nil {
		return nil, subjects, fmt.Sprintf("schema id %d does not parse: %v", id, err)
	}
	var v any
	if err := safeUnmarshal(s, body, &v); err != nil {
		return nil, subjects, fmt.Sprintf("Avro body does not decode with schema id %d: %v", id, err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, subjects, fmt.Sprintf("decoded value does not render as JSON: %v", err)
	}
	return b, subjects, ""
}

// safeUnmarshal is avro.Unmarshal that turns a decoder panic on hostile
// bytes into an error.
func safeUnmarshal(s avro.Schema, body []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoder panicked: %v", r)
		}
	}()
	return avro.Unmarshal(s, body, v)
}

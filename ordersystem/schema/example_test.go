package schema_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/schema"
)

func Example() {
	reg := srfake.New() // in production: the Confluent-compatible registry's URL
	defer reg.Close()
	client, _ := sr.NewClient(sr.URLs(reg.URL()))
	serde, err := schema.New(context.Background(), client)
	if err != nil {
		panic(err)
	}

	ev := order.ShipmentRequested{EventID: "evt_1", ShipmentID: "shp_1", OrderID: "ord_1", RequestedAt: time.Now()}
	value, err := serde.Encode(order.TopicShipmentRequested, &ev) // record value for the producer
	if err != nil {
		panic(err)
	}

	var got order.ShipmentRequested
	format, err := serde.Decode(order.TopicShipmentRequested, value, &got)
	fmt.Println(format, err, got.ShipmentID)

	// A bad record: permanent, classified for the DLQ.
	_, err = serde.Decode(order.TopicShipmentRequested, []byte(`{"eventId":"e"}`), &got)
	fmt.Println(schema.IsDecodeError(err), schema.ErrorClass(err), errors.Is(err, schema.ErrInvalid))
	// Output:
	// avro <nil> shp_1
	// true invalid true
}

package order

// PlaceOrderRequest is the JSON body of checkout's POST /orders. Prices are
// never taken from the client: checkout prices each line from its catalog.
//
//	{"customerId": "17850", "country": "United Kingdom", "reference": "536365",
//	 "channel": "web", "lines": [{"stockCode": "85123A", "quantity": 6}]}
//
// Checkout refuses any other member, at any level (400 unknown_field).
type PlaceOrderRequest struct {
	CustomerID string        `json:"customerId,omitempty"` // optional: absent or null means a guest; "" is rejected (422 bad_customer_id)
	Country    string        `json:"country,omitempty"`
	Reference  string        `json:"reference,omitempty"`
	Channel    string        `json:"channel,omitempty"` // optional: where the order was placed ("web", "api"); absent or null means unknown; see Order.Channel (422 bad_channel)
	Lines      []RequestLine `json:"lines"`
}

// RequestLine is one requested line: a stock code and a quantity (> 0).
type RequestLine struct {
	StockCode string `json:"stockCode"`
	Quantity  int64  `json:"quantity"`
}

// PlaceOrderResponse is checkout's 202 body.
type PlaceOrderResponse struct {
	OrderID string `json:"orderId"`
	Status  string `json:"status"` // always "accepted"
	Total   string `json:"total"`  // decimal string, e.g. "15.300"
}

// ErrorResponse is checkout's body for every 4xx and 5xx answer. Code is a
// stable machine-readable reason (see the Reason* constants); Error is for
// people.
type ErrorResponse struct {
	Code  string `json:"code"`
	Error string `json:"error"`
	// OrderID, StatusURL and IdempotencyKey are set only on a 503 whose
	// outcome is unknown (checkout recorded the order, but Kafka did not
	// acknowledge its event in time, so it may still be published): the
	// order's id, the path to GET its status ("/orders/<id>"), and the
	// Idempotency-Key to retry with (the client's own, or one the server
	// issued for a request sent without one). A retry with that key
	// publishes the same event, never a second order.
	OrderID        string `json:"orderId,omitempty"`
	StatusURL      string `json:"statusUrl,omitempty"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// Rejection reasons returned by checkout in ErrorResponse.Code.
const (
	ReasonMalformedJSON       = "malformed_json"
	ReasonUnknownField        = "unknown_field"
	ReasonBodyTooLarge        = "body_too_large"
	ReasonNoLines             = "no_lines"
	ReasonTooManyLines        = "too_many_lines"
	ReasonUnknownStockCode    = "unknown_stock_code"
	ReasonNotAProduct         = "not_a_product" // a fee code (FeeStockCodes)
	ReasonBadQuantity         = "bad_quantity"
	ReasonBadCustomerID       = "bad_customer_id"
	ReasonBadChannel          = "bad_channel"
	ReasonIdempotencyMismatch = "idempotency_key_reused"
	ReasonAmountOverflow      = "amount_overflow"
)

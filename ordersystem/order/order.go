package order

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Line is one priced line of an order. Repeated lines of the same stock code
// are kept as they are (the data has them, and they are real).
type Line struct {
	StockCode   string `json:"stockCode"`
	Description string `json:"description"`
	Quantity    int64  `json:"quantity"`
	UnitPrice   Money  `json:"unitPriceMilli"`
	LineTotal   Money  `json:"lineTotalMilli"`
}

// Order is an accepted, priced order, as checkout publishes it.
type Order struct {
	OrderID    string    `json:"orderId"`
	CustomerID string    `json:"customerId,omitempty"` // empty for a guest
	Country    string    `json:"country,omitempty"`
	Lines      []Line    `json:"lines"`
	Total      Money     `json:"totalMilli"`
	CreatedAt  time.Time `json:"createdAt"`
	// Reference is the caller's own reference (the replay sets the invoice
	// number); informational only.
	Reference string `json:"reference,omitempty"`
	// Channel is where the order was placed, a short lowercase token such
	// as "web", "api" or "replay" (checkout accepts 1 to 32 of a-z, 0-9,
	// '_' and '-'); "" means unknown. orderCreated carries it since schema
	// version 2; events written with version 1 decode with "".
	Channel string `json:"channel,omitempty"`
}

// MaxChannelLen is the longest Order.Channel; see ValidChannel.
const MaxChannelLen = 32

// ValidChannel reports whether ch is a valid Order.Channel: 1 to
// MaxChannelLen characters of a-z, 0-9, '_' and '-', starting with a letter.
// It is the one definition of the rule: checkout refuses other channels
// (422 bad_channel) and the consumers' contract check (package schema)
// refuses events carrying one. "" (unknown) is not a channel; callers treat
// it as absent before asking.
func ValidChannel(ch string) bool {
	if len(ch) == 0 || len(ch) > MaxChannelLen || ch[0] < 'a' || ch[0] > 'z' {
		return false
	}
	for i := 1; i < len(ch); i++ {
		switch c := ch[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Key is the Kafka record key for the order's events: the customer id, or the
// order id for a guest, so that one customer's orders keep their order.
func (o *Order) Key() string { return KeyFor(o.CustomerID, o.OrderID) }

// KeyFor returns the record key for a customer id and order id: the customer
// id when there is one, the order id for a guest.
func KeyFor(customerID, orderID string) string {
	if customerID != "" {
		return customerID
	}
	return orderID
}

// Guest reports whether the order was placed without a customer id.
func (o *Order) Guest() bool { return o.CustomerID == "" }

// NewID returns a new random identifier with the given prefix, such as
// "ord_5f1c0b6a9e3d4c2b8a7f6e5d4c3b2a19". It is 128 bits of crypto/rand:
// for what must not be guessable or must differ in every digit (a client
// id suffix). Keys of database rows use [NewTimeOrderedID].
func NewID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux (Go 1.24+ documents it)
	return prefix + hex.EncodeToString(b[:])
}

// NewTimeOrderedID returns a new identifier with the given prefix whose 32
// hex digits are a UUID version 7 (RFC 9562, section 5.7; google/uuid):
// 48 bits of Unix time in milliseconds first, then the version, a 12-bit
// sub-millisecond sequence and 62 random bits, such as
// "ord_019ade2b7c4f7a3e9b1d0c2e4f6a8b0d". Within one process each id sorts
// after the one before (google/uuid keeps time and sequence strictly
// increasing); across processes, to the clocks' agreement. So the database indexes keyed by them (orders, order lines,
// inbox rows, payments...) take their inserts at the right edge of the
// B-tree instead of at random leaves: on the embedded SQLite stack half the
// bytes written and about 40 % less CPU for the whole data set
// (docs/benchmarks.md). The id tells when it was made, to the millisecond (the
// order's created time is in its event anyway). Two processes make the
// same id only with the same millisecond, sequence and 62 random bits. The
// same shape as NewID's,
// so either parses where the other does. Safe for concurrent use.
func NewTimeOrderedID(prefix string) string {
	u, err := uuid.NewV7()
	if err != nil { // only when crypto/rand fails, which it does not on Linux
		return NewID(prefix)
	}
	return prefix + hex.EncodeToString(u[:])
}

// NormalizeStockCode returns the canonical form of a stock code: trimmed and
// upper-cased. The data writes the same product as "47566b" and "47566B".
// FeeStockCodes are the stock codes of the Online Retail data that are not
// products but charges, fees and adjustments booked as invoice lines
// (normalized): postage (POST, DOT: dotcom postage, C2: carriage), manual
// entries (M), discounts (D), samples (S), bank charges, Amazon's fee,
// Cancer Research UK commission (CRUK) and bad-debt adjustments (B).
// Checkout refuses them as order lines (422 not_a_product): a client
// orders products; the charges are the seller's.
var FeeStockCodes = []string{"POST", "DOT", "C2", "M", "D", "S", "BANK CHARGES", "AMAZONFEE", "CRUK", "B"}

// IsFeeStockCode reports whether code (normalized or not) is one of
// FeeStockCodes.
func IsFeeStockCode(code string) bool {
	return slices.Contains(FeeStockCodes, NormalizeStockCode(code))
}

func NormalizeStockCode(code string) string {
	return strings.ToUpper(strings.TrimSpace(code))
}

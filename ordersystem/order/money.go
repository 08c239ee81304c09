// Package order is Ordercast's domain: orders, lines, money, the events the
// services exchange, and the validation rules checkout applies.
//
// It has no dependency on Kafka, the schema registry or a database, so every
// service and tool can share it.
package order

import (
	"fmt"
	"strconv"
	"strings"
)

// Currency is the only currency the shop sells in (ISO 4217).
const Currency = "GBP"

// Money is an exact amount in thousandths of the currency unit (1 GBP =
// 1000 Money). The Online Retail data has unit prices with up to three
// decimals, so thousandths represent every price and every line total exactly;
// float64 is never used for money.
//
// The range of int64 thousandths is about ±9.2e15 GBP, far beyond any order.
type Money int64

// ParseMoney parses a decimal string such as "2.55", "0.001", "-11062.06" or
// "38970" into Money. At most three decimals are accepted; more is an error
// rather than a silent rounding. Leading/trailing spaces are not accepted.
func ParseMoney(s string) (Money, error) {
	if s == "" {
		return 0, fmt.Errorf("parse money %q: empty", s)
	}
	neg := false
	body := s
	if body[0] == '-' || body[0] == '+' {
		neg = body[0] == '-'
		body = body[1:]
	}
	intPart, frac, hasDot := strings.Cut(body, ".")
	if intPart == "" && (!hasDot || frac == "") {
		return 0, fmt.Errorf("parse money %q: no digits", s)
	}
	if len(frac) > 3 {
		return 0, fmt.Errorf("parse money %q: more than 3 decimals", s)
	}
	for _, r := range intPart + frac {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("parse money %q: invalid character %q", s, r)
		}
	}
	var units int64
	if intPart != "" {
		v, err := strconv.ParseInt(intPart, 10, 64)
		if err != nil || v > 9_000_000_000_000 {
			return 0, fmt.Errorf("parse money %q: out of range", s)
		}
		units = v * 1000
	}
	if frac != "" {
		frac += strings.Repeat("0", 3-len(frac))
		v, _ := strconv.ParseInt(frac, 10, 64)
		units += v
	}
	if neg {
		units = -units
	}
	return Money(units), nil
}

// String formats m with exactly three decimals ("2.550", "-0.001").
func (m Money) String() string {
	v := int64(m)
	sign := ""
	if v < 0 {
		sign = "-"
		v = -v
	}
	return fmt.Sprintf("%s%d.%03d", sign, v/1000, v%1000)
}

// Times returns m multiplied by a quantity, and false if the product would
// overflow int64.
func (m Money) Times(qty int64) (Money, bool) {
	if qty == 0 || m == 0 {
		return 0, true
	}
	p := int64(m) * qty
	if p/qty != int64(m) {
		return 0, false
	}
	return Money(p), true
}

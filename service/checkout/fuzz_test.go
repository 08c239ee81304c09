package checkout

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/order"
)

// FuzzParseRequest: any body is either rejected with a known code or
// accepted in canonical form, whose hash is stable under re-parsing.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"customerId":"17850","country":"United Kingdom","reference":"536365","lines":[{"stockCode":"85123a","quantity":6}]}`,
		`{"lines":[{"stockCode":" x ","quantity":0}]}`,
		`{"customerId":"","lines":[]}`,
		`{"lines":[{"stockCode":"A","quantity":1e3}]} `,
		`null`, `[]`, `{"lines":[`, `{"lines":null}`,
	} {
		f.Add([]byte(s))
	}
	codes := map[string]bool{
		order.ReasonMalformedJSON: true, order.ReasonBadCustomerID: true, order.ReasonNoLines: true,
		order.ReasonTooManyLines: true, order.ReasonBadQuantity: true,
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, aerr := parseRequest(body)
		if aerr != nil {
			if !codes[aerr.code] || aerr.status < 400 || aerr.status > 499 || aerr.message == "" {
				t.Fatalf("unexpected rejection %+v", aerr)
			}
			return
		}
		if n := len(req.Lines); n == 0 || n > MaxLines {
			t.Fatalf("accepted %d lines", n)
		}
		for _, l := range req.Lines {
			if l.Quantity <= 0 || l.Quantity > MaxQuantity || l.StockCode != order.NormalizeStockCode(l.StockCode) {
				t.Fatalf("accepted line %+v", l)
			}
		}
		if req.CustomerID != "" && !validCustomerID(req.CustomerID) {
			t.Fatalf("accepted customer id %q", req.CustomerID)
		}
		again, aerr := parseRequest(marshal(req))
		if aerr != nil {
			t.Fatalf("canonical form %s rejected: %v", marshal(req), aerr)
		}
		if requestHash(again) != requestHash(req) {
			t.Fatalf("hash changed on re-parsing %s", marshal(req))
		}
	})
}

func TestCanonicalHashIgnoresFormatting(t *testing.T) {
	a := `{"customerId":"1","lines":[{"stockCode":"ab","quantity":2}]}`
	b := "{\n \"lines\": [ {\"quantity\": 2, \"stockCode\": \" AB \", \"unitPrice\": 9} ],\t\"customerId\": \"1\" }\n"
	c := `{"customerId":"1","lines":[{"stockCode":"ab","quantity":3}]}`
	ra, _ := parseRequest([]byte(a))
	rb, _ := parseRequest([]byte(b))
	rc, _ := parseRequest([]byte(c))
	if requestHash(ra) != requestHash(rb) {
		t.Errorf("formatting changed the hash")
	}
	if requestHash(ra) == requestHash(rc) {
		t.Errorf("another quantity kept the hash")
	}
	var back order.PlaceOrderRequest
	if err := json.Unmarshal(marshal(ra), &back); err != nil || !strings.Contains(string(marshal(ra)), `"AB"`) {
		t.Errorf("canonical form %s", marshal(ra))
	}
}

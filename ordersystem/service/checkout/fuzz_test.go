package checkout

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/order"
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
		`{"channel":"web","lines":[{"stockCode":"A","quantity":1,"unitPriceMilli":1}]}`,
		`{"Lines":[{"stockCode":"A","quantity":1}]}`, `{"channel":"Web","lines":[]}`,
	} {
		f.Add([]byte(s))
	}
	codes := map[string]bool{
		order.ReasonMalformedJSON: true, order.ReasonUnknownField: true, order.ReasonBadCustomerID: true,
		order.ReasonBadChannel: true, CodeTooDeep: true, CodeBadText: true, order.ReasonNoLines: true, order.ReasonTooManyLines: true, order.ReasonBadQuantity: true,
		CodeBadCountry: true, CodeBadReference: true, order.ReasonUnknownStockCode: true, // a field too long, a line without a stock code
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
		if req.Channel != "" && !order.ValidChannel(req.Channel) {
			t.Fatalf("accepted channel %q", req.Channel)
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
	b := "{\n \"lines\": [ {\"quantity\": 2, \"stockCode\": \" AB \"} ],\t\"customerId\": \"1\", \"channel\": null }\n"
	c := `{"customerId":"1","lines":[{"stockCode":"ab","quantity":3}]}`
	d := `{"customerId":"1","channel":"web","lines":[{"stockCode":"ab","quantity":2}]}`
	ra, _ := parseRequest([]byte(a))
	rb, _ := parseRequest([]byte(b))
	rc, _ := parseRequest([]byte(c))
	rd, _ := parseRequest([]byte(d))
	if requestHash(ra) != requestHash(rb) {
		t.Errorf("formatting changed the hash")
	}
	if requestHash(ra) == requestHash(rc) {
		t.Errorf("another quantity kept the hash")
	}
	if requestHash(ra) == requestHash(rd) {
		t.Errorf("another channel kept the hash")
	}
	// A request without channel hashes as it did before channel existed,
	// so stored Idempotency-Keys still match their retries after an upgrade.
	if got := string(marshal(ra)); got != `{"customerId":"1","lines":[{"stockCode":"AB","quantity":2}]}`+"\n" {
		t.Errorf("canonical form %s", got)
	}
	// A client-sent price is refused, not ignored.
	if _, aerr := parseRequest([]byte(`{"customerId":"1","lines":[{"stockCode":"ab","quantity":2,"unitPrice":9}]}`)); aerr == nil ||
		aerr.code != order.ReasonUnknownField {
		t.Errorf("a line with unitPrice: %v, want unknown_field", aerr)
	}
	var back order.PlaceOrderRequest
	if err := json.Unmarshal(marshal(ra), &back); err != nil || !strings.Contains(string(marshal(ra)), `"AB"`) {
		t.Errorf("canonical form %s", marshal(ra))
	}
}

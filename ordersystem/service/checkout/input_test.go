package checkout_test

import (
	"strings"
	"testing"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
)

// Input that was accepted and should not be is refused
// with a 4xx whose code says why and whose message names the member.
func TestPlaceOrderRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	const ok = `{"lines":[{"stockCode":"85123A","quantity":1}]}`
	withCountry := func(lit string) string {
		return `{"country":` + lit + `,"lines":[{"stockCode":"85123A","quantity":1}]}`
	}
	for _, c := range []struct {
		name, body, ct, ce string
		status             int
		code, mention      string
	}{
		{name: "gzip", body: ok, ct: "application/json", ce: "gzip", status: 415, code: checkout.CodeUnsupportedContentEncoding, mention: "gzip"},
		{name: "deflate, identity", body: ok, ct: "application/json", ce: "identity, deflate", status: 415, code: checkout.CodeUnsupportedContentEncoding, mention: "deflate"},
		{name: "text/plain", body: ok, ct: "text/plain", status: 415, code: checkout.CodeUnsupportedMediaType, mention: "text/plain"},
		{name: "form", body: ok, ct: "application/x-www-form-urlencoded", status: 415, code: checkout.CodeUnsupportedMediaType},
		{name: "no Content-Type", body: ok, status: 415, code: checkout.CodeUnsupportedMediaType, mention: "missing"},
		{name: "latin1", body: ok, ct: "application/json; charset=latin1", status: 415, code: checkout.CodeUnsupportedMediaType, mention: "latin1"},
		{name: "NUL escaped", body: withCountry(`"United\u0000Kingdom"`), ct: "application/json", status: 400, code: checkout.CodeBadText, mention: "country"},
		{name: "tab escaped", body: withCountry(`"a\tb"`), ct: "application/json", status: 400, code: checkout.CodeBadText, mention: "U+0009"},
		{name: "C1 control", body: withCountry("\"a\u0085b\""), ct: "application/json", status: 400, code: checkout.CodeBadText, mention: "country"},
		{name: "invalid UTF-8", body: withCountry("\"Fran\xe7e\""), ct: "application/json", status: 400, code: checkout.CodeBadText, mention: "UTF-8"},
		{name: "lone high surrogate", body: withCountry(`"a\ud800b"`), ct: "application/json", status: 400, code: checkout.CodeBadText, mention: "country"},
		{name: "lone low surrogate", body: `{"reference":"\udc00","lines":[{"stockCode":"85123A","quantity":1}]}`, ct: "application/json", status: 400, code: checkout.CodeBadText, mention: "reference"},
		{name: "surrogate in stock code", body: `{"lines":[{"stockCode":"8\ud83d","quantity":1}]}`, ct: "application/json", status: 400, code: checkout.CodeBadText, mention: "lines[0].stockCode"},
		{name: "fee code POST", body: `{"lines":[{"stockCode":"85123A","quantity":1},{"stockCode":"post","quantity":1}]}`, ct: "application/json", status: 422, code: order.ReasonNotAProduct, mention: "lines[1].stockCode"},
		{name: "fee code AMAZONFEE", body: `{"lines":[{"stockCode":"AMAZONFEE","quantity":1}]}`, ct: "application/json", status: 422, code: order.ReasonNotAProduct},
		{name: "fee code BANK CHARGES", body: `{"lines":[{"stockCode":"BANK CHARGES","quantity":1}]}`, ct: "application/json", status: 422, code: order.ReasonNotAProduct},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h []string
			if c.ce != "" {
				h = append(h, "Content-Encoding", c.ce)
			}
			r := e.doCT(c.ct, c.body, h...)
			if r.status != c.status || r.errorCode(t) != c.code {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, c.status, c.code)
			}
			if !strings.Contains(string(r.body), c.mention) {
				t.Errorf("message %s does not mention %q", r.body, c.mention)
			}
		})
	}
	// What stays accepted: a valid pair of surrogates (an emoji), non-ASCII
	// text, identity encoding, a +json type.
	for _, c := range []struct{ body, ct, ce string }{
		{withCountry(`"Cura\u00e7ao \ud83d\ude00"`), "application/json", ""},
		{withCountry(`"Côte d'Ivoire"`), "application/json; charset=utf-8", "identity"},
		{ok, "application/merge-patch+json", ""},
	} {
		var h []string
		if c.ce != "" {
			h = append(h, "Content-Encoding", c.ce)
		}
		e.doCT(c.ct, c.body, h...).accepted(t)
	}
	if n := e.accepted(); n != 3 {
		t.Errorf("Accepted = %d, want the 3 valid orders", n)
	}
}

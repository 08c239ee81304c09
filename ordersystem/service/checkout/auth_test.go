package checkout_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
	"github.com/ordercast/ordercast/ordersystem/store"
	"github.com/ordercast/ordercast/ordersystem/store/storetest"
)

const (
	testIssuer   = "https://idp.test"
	testAudience = "checkout-test"
)

// testIdP is an identity provider of the tests: an RSA key whose public
// half is in a PEM key file the Verifier reads (--auth-key-file).
type testIdP struct {
	t       *testing.T
	key     *rsa.PrivateKey
	pubPEM  []byte
	keyFile string
}

func newIdP(t *testing.T) *testIdP {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	p := &testIdP{t: t, key: k, pubPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})}
	p.keyFile = filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(p.keyFile, p.pubPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// verifier is the Verifier of --auth jwt --auth-key-file with RS256 only.
func (p *testIdP) verifier() *authn.Verifier {
	p.t.Helper()
	keys, err := authn.KeyFile(p.keyFile)
	if err != nil {
		p.t.Fatal(err)
	}
	v, err := authn.New(authn.Config{Keys: keys, Issuer: testIssuer, Audience: testAudience, Algorithms: []string{"RS256"}})
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

// claims are good claims for customer, valid for an hour.
func claims(customer string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": testIssuer, "aud": testAudience, "sub": customer, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

// sign signs c with the IdP's key (RS256).
func (p *testIdP) sign(c jwt.MapClaims) string {
	p.t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, c).SignedString(p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

func (p *testIdP) token(customer string) string { return p.sign(claims(customer)) }

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func withAuth(v *authn.Verifier, required bool) envOpt {
	return func(s *envSettings) { s.cfg.Auth, s.cfg.AuthRequired = v, required }
}

func withRateLimit(perSecond float64, burst int) envOpt {
	return func(s *envSettings) { s.cfg.RateLimit, s.cfg.RateBurst = perSecond, burst }
}

const customerOrder = `{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":6}]}`
const guestOrder = `{"lines":[{"stockCode":"85123A","quantity":6}]}`

// The check: an order placed with another customer's token is
// refused, and nothing is recorded nor published.
func TestAuthOtherCustomersTokenRefused(t *testing.T) {
	idp := newIdP(t)
	e := newEnv(t, withAuth(idp.verifier(), false))
	r := e.post(customerOrder, bearer(idp.token("12583"))...)
	if r.status != http.StatusForbidden || r.errorCode(t) != checkout.CodeCustomerMismatch {
		t.Fatalf("order for 17850 with 12583's token: %d %s, want 403 %s", r.status, r.body, checkout.CodeCustomerMismatch)
	}
	if n := e.accepted(); n != 0 {
		t.Fatalf("%d orders accepted after the 403, want 0", n)
	}
	var rows int
	if err := e.db.QueryRowContext(testCtx(t), `SELECT COUNT(*) FROM checkout_requests`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("checkout_requests rows after the 403: %d (%v), want 0", rows, err)
	}
	if e.metric("ordercast_checkout_orders_rejected_total", "code", checkout.CodeCustomerMismatch) != 1 {
		t.Fatalf("rejected{code=%s} not counted", checkout.CodeCustomerMismatch)
	}
	// The customer's own token: accepted, in its name.
	ok := e.post(customerOrder, bearer(idp.token("17850"))...).accepted(t)
	// Without customerId, the token's customer is the order's.
	mine := e.post(guestOrder, bearer(idp.token("12583"))...).accepted(t)
	for id, want := range map[string]string{ok.OrderID: "17850", mine.OrderID: "12583"} {
		r := e.do(http.MethodGet, "/orders/"+id, "", bearer(idp.token(want))...)
		var v checkout.OrderView
		if r.status != http.StatusOK || json.Unmarshal(r.body, &v) != nil || v.CustomerID != want {
			t.Fatalf("GET %s with %s's token: %d %s, want 200 with customerId %s", id, want, r.status, r.body, want)
		}
	}
	evs := e.consume(2)
	got := map[string]bool{}
	for _, c := range evs {
		got[c.ev.CustomerID] = true
	}
	if !got["17850"] || !got["12583"] || len(evs) != 2 {
		t.Fatalf("orderCreated customers %v, want 17850 and 12583 once each", got)
	}
}

// Every kind of bad token is 401 invalid_token with an RFC 6750
// challenge, and records nothing.
func TestAuthInvalidTokens(t *testing.T) {
	idp := newIdP(t)
	other := newIdP(t) // a key the verifier does not trust
	e := newEnv(t, withAuth(idp.verifier(), false))
	now := time.Now()
	with := func(k string, v any) jwt.MapClaims { c := claims("17850"); c[k] = v; return c }
	without := func(k string) jwt.MapClaims { c := claims("17850"); delete(c, k); return c }

	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	es256, _ := jwt.NewWithClaims(jwt.SigningMethodES256, claims("17850")).SignedString(ecKey)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	eddsa, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims("17850")).SignedString(edKey)
	// alg none: header {"alg":"none"}, no signature.
	b64 := base64.RawURLEncoding.EncodeToString
	payload, _ := json.Marshal(claims("17850"))
	none := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64(payload) + "."
	// HS/RS confusion: HS256 with the IdP's public key (PEM) as the secret.
	hsInput := b64([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + b64(payload)
	mac := hmac.New(sha256.New, idp.pubPEM)
	mac.Write([]byte(hsInput))
	confused := hsInput + "." + b64(mac.Sum(nil))
	// A good token with its signature swapped for another key's.
	good := idp.token("17850")
	forged := other.token("17850")
	tampered := good[:strings.LastIndex(good, ".")] + forged[strings.LastIndex(forged, "."):]

	for _, tc := range []struct {
		name, token, reason string
	}{
		{"expired", idp.sign(with("exp", now.Add(-time.Minute).Unix())), authn.ReasonExpired},
		{"expired beyond the 30 s skew", idp.sign(with("exp", now.Add(-31*time.Second).Unix())), authn.ReasonExpired},
		{"no exp", idp.sign(without("exp")), authn.ReasonExpired},
		{"not yet valid", idp.sign(with("nbf", now.Add(time.Minute).Unix())), authn.ReasonNotYetValid},
		{"wrong issuer", idp.sign(with("iss", "https://evil.test")), authn.ReasonIssuer},
		{"wrong audience", idp.sign(with("aud", "another-api")), authn.ReasonAudience},
		{"no subject", idp.sign(without("sub")), authn.ReasonNoCustomer},
		{"wrong algorithm ES256", es256, authn.ReasonAlgorithm},
		{"wrong algorithm EdDSA", eddsa, authn.ReasonAlgorithm},
		{"alg none", none, authn.ReasonAlgorithm},
		{"HS256 with the public key as secret", confused, authn.ReasonAlgorithm},
		{"signed by an untrusted key", forged, authn.ReasonSignature},
		{"bad signature", tampered, authn.ReasonSignature},
		{"malformed", "not.a.jwt", authn.ReasonMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.metric("ordercast_checkout_auth_failures_total", "reason", tc.reason)
			for _, body := range []string{customerOrder, guestOrder} { // a bad token is never taken for a guest
				r := e.post(body, bearer(tc.token)...)
				if r.status != http.StatusUnauthorized || r.errorCode(t) != checkout.CodeUnauthorized {
					t.Fatalf("%d %s, want 401 %s", r.status, r.body, checkout.CodeUnauthorized)
				}
				if h := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(h, `Bearer realm="ordercast", error="invalid_token", error_description="`) {
					t.Fatalf("WWW-Authenticate %q, want a Bearer invalid_token challenge (RFC 6750)", h)
				}
			}
			if got := e.metric("ordercast_checkout_auth_failures_total", "reason", tc.reason) - before; got != 2 {
				t.Fatalf("auth_failures_total{reason=%s} grew by %v, want 2", tc.reason, got)
			}
		})
	}
	if n := e.accepted(); n != 0 {
		t.Fatalf("%d orders accepted with bad tokens, want 0", n)
	}
	// Within the skew: expired 10 s ago is still accepted (default leeway 30 s).
	e.post(customerOrder, bearer(idp.sign(with("exp", now.Add(-10*time.Second).Unix())))...).accepted(t)
}

// Guests order without a token; an order naming a customer needs one; a
// malformed Authorization header is 400.
func TestAuthGuestPath(t *testing.T) {
	idp := newIdP(t)
	e := newEnv(t, withAuth(idp.verifier(), false))
	guest := e.post(guestOrder).accepted(t)
	r := e.post(customerOrder)
	if r.status != http.StatusUnauthorized || r.errorCode(t) != checkout.CodeUnauthorized {
		t.Fatalf("customer order without a token: %d %s, want 401", r.status, r.body)
	}
	if h := r.header.Get("WWW-Authenticate"); h != `Bearer realm="ordercast"` {
		t.Fatalf("WWW-Authenticate %q, want the bare challenge (no token was sent, RFC 6750 section 3.1)", h)
	}
	// Anything but one usable bearer token is 400, never a guest: another
	// scheme, a JWT without "Bearer ", an empty header, "Bearer" alone, a
	// repeated header.
	for _, h := range [][]string{{"Authorization", "Basic YTpi"}, {"Authorization", idp.token("17850")}, {"Authorization", ""}, {"Authorization", "  "},
		{"Authorization", "Bearer "}, {"Authorization", "Bearer " + idp.token("17850"), "Authorization", "Bearer x"}} {
		if r := e.post(guestOrder, h...); r.status != http.StatusBadRequest || r.errorCode(t) != checkout.CodeBadAuthorization ||
			!strings.Contains(r.header.Get("WWW-Authenticate"), `error="invalid_request"`) {
			t.Fatalf("Authorization %q: %d %s %q, want 400 %s with error=invalid_request", h, r.status, r.body, r.header.Get("WWW-Authenticate"), checkout.CodeBadAuthorization)
		}
	}
	// A guest order is shown by its id, as before authentication.
	if r := e.do(http.MethodGet, "/orders/"+guest.OrderID, ""); r.status != http.StatusOK {
		t.Fatalf("GET of a guest order without a token: %d %s, want 200", r.status, r.body)
	}
	if n := e.accepted(); n != 1 {
		t.Fatalf("%d orders accepted, want the guest's only", n)
	}
}

// --auth-required: no guest orders, no anonymous GET.
func TestAuthRequired(t *testing.T) {
	idp := newIdP(t)
	e := newEnv(t, withAuth(idp.verifier(), true))
	r := e.post(guestOrder)
	if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != `Bearer realm="ordercast"` {
		t.Fatalf("guest order with AuthRequired: %d %s %q, want 401 with a Bearer challenge", r.status, r.body, r.header.Get("WWW-Authenticate"))
	}
	ok := e.post(guestOrder, bearer(idp.token("17850"))...).accepted(t)
	if r := e.do(http.MethodGet, "/orders/"+ok.OrderID, ""); r.status != http.StatusUnauthorized {
		t.Fatalf("anonymous GET with AuthRequired: %d, want 401", r.status)
	}
	if r := e.do(http.MethodGet, "/orders/no-such-order", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("anonymous GET of an unknown order with AuthRequired: %d, want 401 (not 404: it says nothing about the id)", r.status)
	}
	if n := e.accepted(); n != 1 {
		t.Fatalf("%d orders accepted, want 1", n)
	}
}

// GET /orders/{id} shows a customer's order to that customer only.
func TestAuthGetAnothersOrder(t *testing.T) {
	idp := newIdP(t)
	e := newEnv(t, withAuth(idp.verifier(), false))
	ok := e.post(customerOrder, bearer(idp.token("17850"))...).accepted(t)
	r := e.do(http.MethodGet, "/orders/"+ok.OrderID, "", bearer(idp.token("12583"))...)
	if r.status != http.StatusForbidden || r.errorCode(t) != checkout.CodeForbidden || strings.Contains(string(r.body), "85123A") {
		t.Fatalf("GET of 17850's order with 12583's token: %d %s, want 403 %s without the order", r.status, r.body, checkout.CodeForbidden)
	}
	r = e.do(http.MethodGet, "/orders/"+ok.OrderID, "")
	if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("GET of 17850's order without a token: %d %s, want 401 with WWW-Authenticate", r.status, r.body)
	}
	if r := e.do(http.MethodGet, "/orders/"+ok.OrderID, "", bearer(idp.token("17850"))...); r.status != http.StatusOK {
		t.Fatalf("GET of 17850's order with its token: %d %s, want 200", r.status, r.body)
	}
	// A malformed Authorization header is refused on GET as on POST, not
	// read as a guest's request.
	if r := e.do(http.MethodGet, "/orders/"+ok.OrderID, "", "Authorization", "Bearer "); r.status != http.StatusBadRequest ||
		r.errorCode(t) != checkout.CodeBadAuthorization || !strings.Contains(r.header.Get("WWW-Authenticate"), "invalid_request") {
		t.Fatalf("GET with Bearer and no token: %d %s %q, want 400 %s with error=invalid_request", r.status, r.body, r.header.Get("WWW-Authenticate"), checkout.CodeBadAuthorization)
	}
}

// Per-client rate limiting: past its burst a client gets 429 with
// Retry-After, while another client (another customer, or the guests'
// address) is not held back.
func TestAuthRateLimit(t *testing.T) {
	idp := newIdP(t)
	// 1 request per 100 s after a burst of 2: the third is refused
	// whatever the test's speed.
	e := newEnv(t, withAuth(idp.verifier(), false), withRateLimit(0.01, 2))
	a, b := bearer(idp.token("17850")), bearer(idp.token("12583"))
	e.post(guestOrder, a...).accepted(t)
	if r := e.do(http.MethodGet, "/orders/x", "", a...); r.status != http.StatusNotFound {
		t.Fatalf("second request of 17850: %d, want 404 (GETs count too)", r.status)
	}
	r := e.post(guestOrder, a...)
	if r.status != http.StatusTooManyRequests || r.errorCode(t) != checkout.CodeRateLimited {
		t.Fatalf("third request of 17850: %d %s, want 429 %s", r.status, r.body, checkout.CodeRateLimited)
	}
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || secs < 90 || secs > 100 {
		t.Fatalf("Retry-After %q, want about 100 s (one request per 100 s)", r.header.Get("Retry-After"))
	}
	if r := e.do(http.MethodGet, "/orders/x", "", a...); r.status != http.StatusTooManyRequests {
		t.Fatalf("GET of 17850 past its limit: %d, want 429", r.status)
	}
	// Other clients have their own buckets: another customer, and the
	// guests (by IP, httptest's 192.0.2.1).
	e.post(guestOrder, b...).accepted(t)
	e.post(guestOrder).accepted(t)
	if n := e.accepted(); n != 3 {
		t.Fatalf("%d orders accepted, want 3 (the 429 records nothing)", n)
	}
	// An invalid token counts against the address, not the customer it
	// names: the guests' bucket has one request left, then 429.
	if r := e.post(guestOrder, bearer("bad.token.here")...); r.status != http.StatusUnauthorized {
		t.Fatalf("bad token: %d, want 401", r.status)
	}
	if r := e.post(guestOrder); r.status != http.StatusTooManyRequests {
		t.Fatalf("third request from the guests' address: %d, want 429", r.status)
	}
}

// Bad tokens past the limit cost no signature check: every request is
// charged to its address before its token is verified, so of 10 requests
// with forged tokens from one address and a burst of 3, 3 are verified (and
// refused, 401) and 7 answered 429 without verification.
func TestAuthBadTokensPastLimitNotVerified(t *testing.T) {
	idp, forger := newIdP(t), newIdP(t)
	e := newEnv(t, withAuth(idp.verifier(), false), withRateLimit(0.01, 3))
	forged := bearer(forger.token("17850")) // signed by another key
	var unauthorized, limited int
	for range 10 {
		switch r := e.post(guestOrder, forged...); r.status {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			limited++
		default:
			t.Fatalf("forged token: %d %s, want 401 or 429", r.status, r.body)
		}
	}
	if unauthorized != 3 || limited != 7 {
		t.Fatalf("%d answered 401 and %d 429, want 3 and 7", unauthorized, limited)
	}
	if got := e.metric("ordercast_checkout_auth_failures_total"); got != 3 {
		t.Fatalf("%v tokens verified and refused, want 3: the rest must be refused before verification", got)
	}
}

// IPv6 clients are limited by their /64, IPv4 clients by their address.
func TestAuthRateLimitSourceKey(t *testing.T) {
	same := [][2]string{
		{"2001:db8::1", "2001:db8::ffff:1"},
		{"2001:db8:0:0:1:2:3:4", "2001:db8::"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
	}
	for _, p := range same {
		if a, b := checkout.SourceKey(p[0]), checkout.SourceKey(p[1]); a != b {
			t.Errorf("%s and %s: buckets %q and %q, want one", p[0], p[1], a, b)
		}
	}
	differ := [][2]string{{"2001:db8::1", "2001:db8:0:1::1"}, {"192.0.2.1", "192.0.2.2"}}
	for _, p := range differ {
		if a, b := checkout.SourceKey(p[0]), checkout.SourceKey(p[1]); a == b {
			t.Errorf("%s and %s share bucket %q, want two", p[0], p[1], a)
		}
	}
}

// An Idempotency-Key is scoped by its caller: customer A's key is A's alone
// (another customer, or a guest, using it places their own order and never
// learns A's order id; a guest taking it first does not block A); guests
// share one scope, whose 422 does not name the order; a customer's key
// stored before keys were scoped is still replayed, for that customer only.
// On SQLite and PostgreSQL (whose claims read and insert in one statement).
func TestIdempotencyKeyScopedByCaller(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) { testIdempotencyKeyScopedByCaller(t, db) })
}

func testIdempotencyKeyScopedByCaller(t *testing.T, db *store.DB) {
	idp := newIdP(t)
	e := newEnvOn(t, db, withAuth(idp.verifier(), false))
	tokA, tokB := idp.token("17850"), idp.token("12583")
	key := func(k string) []string { return []string{"Idempotency-Key", k} }
	post := func(body, tok, k string) response {
		t.Helper()
		h := key(k)
		if tok != "" {
			h = append(h, bearer(tok)...)
		}
		return e.post(body, h...)
	}
	a := post(customerOrder, tokA, "invoice-536365").accepted(t)
	for _, who := range []struct{ name, tok string }{{"customer 12583", tokB}, {"a guest", ""}} {
		r := post(guestOrder, who.tok, "invoice-536365")
		if r.status != http.StatusAccepted || strings.Contains(string(r.body), a.OrderID) {
			t.Fatalf("%s with 17850's key: %d %s, want 202 of an order of their own, never naming %s", who.name, r.status, r.body, a.OrderID)
		}
	}
	if again := post(customerOrder, tokA, "invoice-536365"); again.accepted(t).OrderID != a.OrderID ||
		again.header.Get(checkout.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("17850's retry: %d %s, want the replay of %s", again.status, again.body, a.OrderID)
	}

	// A guest takes the predictable key first: 17850's order is still taken.
	g := post(guestOrder, "", "invoice-536366").accepted(t)
	if r := post(customerOrder, tokA, "invoice-536366"); r.status != http.StatusAccepted || r.accepted(t).OrderID == g.OrderID {
		t.Fatalf("17850 after a guest took the key: %d %s, want 202 of a new order", r.status, r.body)
	}
	// Guests share a scope: another guest's different order with it is
	// 422, without the first guest's order id.
	r := post(`{"lines":[{"stockCode":"85123A","quantity":7}]}`, "", "invoice-536366")
	if r.status != http.StatusUnprocessableEntity || r.errorCode(t) != order.ReasonIdempotencyMismatch || strings.Contains(string(r.body), g.OrderID) {
		t.Fatalf("another guest's order with a guest's key: %d %s, want 422 %s not naming %s", r.status, r.body, order.ReasonIdempotencyMismatch, g.OrderID)
	}
	// A customer's own 422 names their order.
	if r := post(`{"lines":[{"stockCode":"85123A","quantity":7}]}`, tokA, "invoice-536365"); r.status != http.StatusUnprocessableEntity ||
		!strings.Contains(string(r.body), a.OrderID) {
		t.Fatalf("17850's other order with its key: %d %s, want 422 naming %s", r.status, r.body, a.OrderID)
	}

	// A customer's row stored unscoped (before this rule): replayed to that
	// customer, ignored for another.
	old := post(customerOrder, tokA, "legacy").accepted(t)
	if _, err := e.db.ExecContext(testCtx(t), e.db.Rebind(`UPDATE checkout_requests SET idempotency_key = ? WHERE order_id = ?`), "legacy", old.OrderID); err != nil {
		t.Fatal(err)
	}
	if got := post(customerOrder, tokA, "legacy").accepted(t); got.OrderID != old.OrderID {
		t.Fatalf("17850's retry of an unscoped row: order %s, want %s", got.OrderID, old.OrderID)
	}
	if n := e.rowCount(checkout.ScopedKey("17850", "legacy")); n != 0 {
		t.Fatalf("17850's retry of an unscoped row also stored %d row(s) under its scoped key, want none", n)
	}
	if r := post(guestOrder, tokB, "legacy"); r.status != http.StatusAccepted || r.accepted(t).OrderID == old.OrderID {
		t.Fatalf("12583 with 17850's unscoped key: %d %s, want 202 of a new order", r.status, r.body)
	}
	if status, id := e.requestRow("legacy"); status != "published" || id != old.OrderID {
		t.Fatalf("unscoped row %s %s, want published %s", status, id, old.OrderID)
	}
	// The same customer reusing the key for another order gets that order
	// (the unscoped row cannot say whose it is: its hash, which includes
	// the customer, differs as another customer's would); a retry of the
	// first request still replays the first order, not a 422 naming the
	// second.
	other := post(`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":9}]}`, tokA, "legacy").accepted(t)
	if other.OrderID == old.OrderID {
		t.Fatalf("17850's other request with the unscoped key: order %s, want a new one", other.OrderID)
	}
	if r := post(customerOrder, tokA, "legacy"); r.status != http.StatusAccepted || r.accepted(t).OrderID != old.OrderID {
		t.Fatalf("17850's retry of the unscoped row after the key's reuse: %d %s, want a replay of %s", r.status, r.body, old.OrderID)
	}
}

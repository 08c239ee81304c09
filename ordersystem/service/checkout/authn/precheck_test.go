package authn_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
)

// Tokens no valid token looks like are refused before their signature is
// checked (the key set is never consulted): one over MaxTokenBytes, a
// header or claims set with a member twice, a "crit" header (RFC 7515
// section 4.1.11), a lifetime over MaxLifetime; a well-formed token of the
// same key still verifies.
func TestVerifyRefusesBeforeSignature(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now().Truncate(time.Second)
	lookups := 0
	v, err := authn.New(authn.Config{Keys: func(*jwt.Token) (any, error) { lookups++; return pub, nil },
		Issuer: "i", Audience: "a", Algorithms: []string{"EdDSA"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	// signed signs header and claims as they are written (so a duplicate
	// member stays in the bytes).
	signed := func(header, claims string) string {
		in := b64(header) + "." + b64(claims)
		sig, err := jwt.SigningMethodEdDSA.Sign(in, priv)
		if err != nil {
			t.Fatal(err)
		}
		return in + "." + base64.RawURLEncoding.EncodeToString(sig)
	}
	claims := func(sub string, iat, exp time.Time) string {
		return `{"iss":"i","aud":"a","sub":"` + sub + `","iat":` + itoa(iat.Unix()) + `,"exp":` + itoa(exp.Unix()) + `}`
	}
	hdr := `{"alg":"EdDSA","typ":"JWT"}`
	good := signed(hdr, claims("17850", now, now.Add(time.Hour)))
	if c, err := v.Verify(t.Context(), good); err != nil || c != "17850" {
		t.Fatalf("a good token: %q, %v", c, err)
	}
	for _, tc := range []struct{ name, tok, reason string }{
		{"over MaxTokenBytes", signed(hdr, claims(strings.Repeat("x", authn.MaxTokenBytes), now, now.Add(time.Hour))), authn.ReasonTooLarge},
		{"a header member twice", signed(`{"alg":"EdDSA","alg":"none"}`, claims("17850", now, now.Add(time.Hour))), authn.ReasonMalformed},
		{"a claim twice", signed(hdr, `{"iss":"i","aud":"a","sub":"17850","sub":"12583","exp":`+itoa(now.Add(time.Hour).Unix())+`}`), authn.ReasonMalformed},
		{"crit", signed(`{"alg":"EdDSA","crit":["exp"]}`, claims("17850", now, now.Add(time.Hour))), authn.ReasonCritical},
		{"a lifetime of 30 days", signed(hdr, claims("17850", now, now.Add(30*24*time.Hour))), authn.ReasonLifetime},
		{"no iat, valid for 30 days from now", signed(hdr, `{"iss":"i","aud":"a","sub":"17850","exp":`+itoa(now.Add(30*24*time.Hour).Unix())+`}`), authn.ReasonLifetime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := lookups
			_, err := v.Verify(t.Context(), tc.tok)
			var te *authn.TokenError
			if !errors.As(err, &te) || te.Reason != tc.reason {
				t.Fatalf("Verify: %v, want a TokenError with reason %s", err, tc.reason)
			}
			if lookups != before {
				t.Fatalf("the key set was consulted %d times: the token must be refused before its signature is checked", lookups-before)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// With Config.Types set, only tokens of those types verify: an RFC 9068
// access token (typ at+jwt, also as application/at+jwt) is accepted; a
// token typed JWT, or without typ, is refused before its signature is
// checked.
func TestVerifyTypes(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	lookups := 0
	v, err := authn.New(authn.Config{Keys: func(*jwt.Token) (any, error) { lookups++; return pub, nil },
		Issuer: "i", Audience: "a", Algorithms: []string{"EdDSA"}, Types: []string{"at+jwt"}})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(typ any) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "17850",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()})
		if typ == nil {
			delete(tok.Header, "typ")
		} else {
			tok.Header["typ"] = typ
		}
		s, err := tok.SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, typ := range []any{"at+jwt", "application/at+JWT"} {
		if _, err := v.Verify(t.Context(), sign(typ)); err != nil {
			t.Errorf("typ %v: %v, want accepted", typ, err)
		}
	}
	for _, typ := range []any{"JWT", nil} {
		before := lookups
		_, err := v.Verify(t.Context(), sign(typ))
		var te *authn.TokenError
		if !errors.As(err, &te) || te.Reason != authn.ReasonType || lookups != before {
			t.Errorf("typ %v: %v (%d key lookups), want refused as %s before the signature", typ, err, lookups-before, authn.ReasonType)
		}
	}
}

// FuzzVerify: any bearer token is refused with a TokenError (or accepted,
// for a token this test's key signed), never a panic, and a token over
// MaxTokenBytes is always refused as too large.
func FuzzVerify(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	v, err := authn.New(authn.Config{Keys: func(*jwt.Token) (any, error) { return pub, nil },
		Issuer: "i", Audience: "a", Algorithms: []string{"EdDSA"}})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "17850",
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}).SignedString(priv)
	for _, s := range []string{good, "", ".", "..", "a.b.c", good + "x", strings.Repeat("e", 100),
		"eyJhbGciOiJub25lIn0.e30.", "eyJhbGciOiJFZERTQSIsImFsZyI6Im5vbmUifQ.e30.x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := v.Verify(t.Context(), tok)
		if err == nil {
			if c == "" {
				t.Fatal("accepted with no customer")
			}
			return
		}
		var te *authn.TokenError
		if !errors.As(err, &te) {
			t.Fatalf("Verify: %T %v, want a *TokenError", err, err)
		}
		if len(tok) > authn.MaxTokenBytes && te.Reason != authn.ReasonTooLarge {
			t.Fatalf("a %d-byte token refused as %s, want %s", len(tok), te.Reason, authn.ReasonTooLarge)
		}
	})
}

// Package authn verifies the bearer tokens (JWT, RFC 7519) that checkout's
// HTTP API is called with, and mints the development tokens of `ordercast
// up`'s --auth dev mode.
//
// A [Verifier] checks a token's signature against a key set (a JWKS URL,
// [JWKS]; a key file, [KeyFile]; or the development key, [DevKey.Keys]),
// its algorithm against an explicit allow-list of asymmetric algorithms
// (never "none", never an HMAC one, so that a public key can never be used
// as an HMAC secret: the "HS/RS confusion"), its issuer, audience and
// expiry (with a bounded clock skew), and returns the customer the token
// speaks for: the value of a configurable claim, "sub" by default.
//
// The JWT parsing and signature checks are github.com/golang-jwt/jwt/v5;
// the key sets are github.com/MicahParks/keyfunc/v3 over
// github.com/MicahParks/jwkset (JWKS fetched over HTTP, refreshed hourly
// and at most every 5 minutes on an unknown kid).
package authn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/ordercast/ordercast/ordersystem/internal/jsonlimit"
)

// Defaults and bounds of Config.
const (
	// DefaultLeeway is the default Config.Leeway: 30 s.
	DefaultLeeway = 30 * time.Second
	// MaxLeeway is the largest Config.Leeway accepted: 5 minutes (a larger
	// skew lets an expired token live on unnoticed).
	MaxLeeway = 5 * time.Minute
	// DefaultCustomerClaim is the default Config.CustomerClaim: "sub"
	// (RFC 7519 section 4.1.2).
	DefaultCustomerClaim = "sub"
	// DefaultCacheSize is the default Config.CacheSize: 100,000 verified
	// tokens (a few hundred bytes each: tens of MB at most).
	DefaultCacheSize = 100_000
	// DefaultCacheTTL is the default Config.CacheTTL: 1 minute.
	DefaultCacheTTL = time.Minute
)

// Algorithms are the JWS algorithms (RFC 7518, RFC 8037) a Verifier may be
// allowed: RSA PKCS#1 v1.5 and PSS, ECDSA and Ed25519. HMAC (HS256...) and
// "none" are not among them and are refused by New.
var Algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// DefaultAlgorithms is the default Config.Algorithms: RS256 (the most common
// of identity providers), ES256 and EdDSA.
var DefaultAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// Config configures a Verifier.
type Config struct {
	// Keys returns the key that verifies a token (its "kid" header picks
	// it, or every key of the set is tried). Required: JWKS, KeyFile or
	// DevKey.Keys.
	Keys jwt.Keyfunc
	// Issuer is the required "iss" claim (exact match). Required.
	Issuer string
	// Audience is the required "aud" claim: the token's audience must
	// contain it (RFC 7519 section 4.1.3). Required.
	Audience string
	// Algorithms lists the JWS "alg" values accepted, each one of
	// Algorithms. Default DefaultAlgorithms. A token signed with another
	// is refused, whatever its key.
	Algorithms []string
	// Leeway is the clock skew allowed when checking "exp", "nbf" and
	// "iat". Default DefaultLeeway (30 s); zero means the default; negative
	// or above MaxLeeway is an error.
	Leeway time.Duration
	// CustomerClaim names the claim whose string value is the customer id
	// the token speaks for. Default DefaultCustomerClaim ("sub").
	CustomerClaim string
	// CacheSize is how many verified tokens the Verifier remembers, so that
	// a client sending the same token with each request pays for its
	// signature check once (an Ed25519 or ECDSA verification costs tens of
	// microseconds, an RSA one more: 9 % of checkout's CPU at 1,000
	// orders/s without the cache). The key is the whole token, signature
	// included, so only the very bytes verified are accepted again. Zero
	// means DefaultCacheSize; negative turns the cache off. The least
	// recently used token is forgotten first (hashicorp/golang-lru).
	CacheSize int
	// CacheTTL bounds how long a verified token is accepted without its
	// signature checked again, and so how long it outlives the removal of
	// its signing key from the key set (a rotation after a key leak): at
	// most this long, and never past the token's own expiry (exp, with
	// Leeway, as when it was verified). Zero means DefaultCacheTTL;
	// negative or above an hour is an error. Envoy's jwt_authn keeps such
	// a cache too (jwt_cache_config).
	CacheTTL time.Duration
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
	// MaxLifetime is the longest a token may be valid: exp - iat, or exp -
	// now for a token without iat. Default DefaultMaxLifetime (24 h); a
	// negative value turns the check off. A stolen token is useful at most
	// this long.
	MaxLifetime time.Duration
	// Types, if not empty, are the token types accepted: the JOSE "typ"
	// header (RFC 7515 section 4.1.9), compared without case and with an
	// "application/" prefix removed, such as "at+jwt" for RFC 9068 access
	// tokens (which keeps an ID token or another JWT of the same issuer
	// from being taken for an access token, RFC 8725 section 3.11). A token
	// without typ or of another type is refused (ReasonType). Default
	// empty: any type.
	Types []string
}

// MaxTokenBytes is the longest bearer token Verify reads; a longer one is
// refused (ReasonTooLarge) before it is decoded. Identity providers' access
// tokens are well under 2 KiB.
const MaxTokenBytes = 8 << 10

// DefaultMaxLifetime is Config.MaxLifetime by default.
const DefaultMaxLifetime = 24 * time.Hour

// Verifier verifies bearer tokens. Create it with New; it is safe for
// concurrent use.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	cache  *lru.Cache[string, verified] // nil: no cache
}

// verified is a cached token's outcome: the customer it speaks for, until
// when it may be accepted without checking it again.
type verified struct {
	customer string
	until    time.Time
}

// New checks cfg and returns a Verifier. Errors name the field: Keys,
// Issuer or Audience missing, an algorithm that is not one of Algorithms
// (HS256 and none are refused with the reason), a Leeway out of range.
func New(cfg Config) (*Verifier, error) {
	if cfg.Keys == nil {
		return nil, errors.New("authn: Config.Keys is required (a JWKS URL, a key file or the dev key)")
	}
	if cfg.Issuer == "" {
		return nil, errors.New("authn: Config.Issuer is required: the exact \"iss\" of the tokens")
	}
	if cfg.Audience == "" {
		return nil, errors.New("authn: Config.Audience is required: the \"aud\" the tokens are for")
	}
	if len(cfg.Algorithms) == 0 {
		cfg.Algorithms = DefaultAlgorithms
	}
	if err := CheckAlgorithms(cfg.Algorithms); err != nil {
		return nil, fmt.Errorf("authn: Config.Algorithms: %w", err)
	}
	if cfg.Leeway < 0 || cfg.Leeway > MaxLeeway {
		return nil, fmt.Errorf("authn: Config.Leeway %v: want 0 (the default, %v) to %v", cfg.Leeway, DefaultLeeway, MaxLeeway)
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = DefaultMaxLifetime
	}
	if cfg.CustomerClaim == "" {
		cfg.CustomerClaim = DefaultCustomerClaim
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CacheTTL < 0 || cfg.CacheTTL > time.Hour {
		return nil, fmt.Errorf("authn: Config.CacheTTL %v: want 0 (the default, %v) to 1h", cfg.CacheTTL, DefaultCacheTTL)
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	v := &Verifier{cfg: cfg}
	if cfg.CacheSize > 0 {
		c, err := lru.New[string, verified](cfg.CacheSize)
		if err != nil {
			return nil, fmt.Errorf("authn: Config.CacheSize %d: %w", cfg.CacheSize, err)
		}
		v.cache = c
	}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods(slices.Clone(cfg.Algorithms)),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithTimeFunc(cfg.Now),
	)
	return v, nil
}

// CheckAlgorithms returns an error naming the first of algs that is not one
// of Algorithms, saying why for "none" and the HMAC algorithms.
func CheckAlgorithms(algs []string) error {
	for _, a := range algs {
		switch {
		case slices.Contains(Algorithms, a):
		case strings.EqualFold(a, "none"):
			return fmt.Errorf("%q is refused: an unsigned token proves nothing; want some of %s", a, strings.Join(Algorithms, ", "))
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			return fmt.Errorf("%q is refused: HMAC needs a secret shared with the issuer, and a verifier holding it could mint tokens; want some of %s", a, strings.Join(Algorithms, ", "))
		default:
			return fmt.Errorf("%q is not a JWS algorithm this verifier accepts; want some of %s", a, strings.Join(Algorithms, ", "))
		}
	}
	return nil
}

// Issuer returns the issuer the Verifier requires.
func (v *Verifier) Issuer() string { return v.cfg.Issuer }

// Verify checks a bearer token (the compact JWS, without "Bearer ") and
// returns the customer it speaks for: the CustomerClaim's value, a
// non-empty string. Any failure is a *TokenError (see its Reason). ctx
// bounds a key fetch when the key set is a JWKS URL that must be refreshed.
// A token verified in the last CacheTTL (and not expired) is accepted from
// the cache without its checks (see Config.CacheSize); refusals are never
// cached. Safe for concurrent use.
func (v *Verifier) Verify(ctx context.Context, raw string) (string, error) {
	now := v.cfg.Now()
	if v.cache != nil {
		if e, ok := v.cache.Get(raw); ok {
			if now.Before(e.until) {
				return e.customer, nil
			}
			v.cache.Remove(raw)
		}
	}
	customer, exp, err := v.verify(ctx, raw)
	if err == nil && v.cache != nil {
		v.cache.Add(raw, verified{customer: customer, until: minTime(now.Add(v.cfg.CacheTTL), exp.Add(v.cfg.Leeway))})
	}
	return customer, err
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// verify checks raw in full and returns its customer and expiry (exp).
func (v *Verifier) verify(ctx context.Context, raw string) (string, time.Time, error) {
	if err := v.precheck(raw); err != nil {
		return "", time.Time{}, err
	}
	claims := jwt.MapClaims{}
	keys := v.cfg.Keys
	_, err := v.parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
		return keys(t)
	})
	if err != nil {
		return "", time.Time{}, tokenError(err)
	}
	c, ok := claims[v.cfg.CustomerClaim]
	s, isString := c.(string)
	if !ok || !isString || s == "" {
		return "", time.Time{}, &TokenError{Reason: ReasonNoCustomer, Description: fmt.Sprintf("the token has no %q claim (a non-empty string: the customer id)", v.cfg.CustomerClaim)}
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil { // WithExpirationRequired: not reached
		return "", time.Time{}, &TokenError{Reason: ReasonExpired, Description: "the token has no valid exp claim"}
	}
	return s, exp.Time, nil
}

// precheck refuses, before any signature is checked, what no valid token
// is: a token over MaxTokenBytes, a JOSE header or claims set with a member
// twice (RFC 7515 section 5.2 and RFC 7519 section 4 let a recipient refuse
// them; the parser would take the last), a "crit" header (RFC 7515 section
// 4.1.11: no extension is understood here, so the token must be refused),
// and a lifetime over Config.MaxLifetime.
func (v *Verifier) precheck(raw string) *TokenError {
	if len(raw) > MaxTokenBytes {
		return &TokenError{Reason: ReasonTooLarge, Description: fmt.Sprintf("the token is over %d bytes", MaxTokenBytes)}
	}
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return &TokenError{Reason: ReasonMalformed, Description: "the token is not a well-formed JWT"}
	}
	var hdr struct {
		Crit json.RawMessage `json:"crit"`
		Typ  *string         `json:"typ"`
	}
	var claims struct {
		Exp *float64 `json:"exp"`
		Iat *float64 `json:"iat"`
	}
	for i, dst := range []any{&hdr, &claims} {
		what := [...]string{"header", "claims"}[i]
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			return &TokenError{Reason: ReasonMalformed, Description: "the token's " + what + " is not base64url", Err: err}
		}
		if err := jsonlimit.Unmarshal(b, dst, 8); err != nil {
			return &TokenError{Reason: ReasonMalformed, Description: "the token's " + what + " is not a JSON object with each member once", Err: err}
		}
	}
	if hdr.Crit != nil {
		return &TokenError{Reason: ReasonCritical, Description: `the token has a "crit" header: no extension is understood here`}
	}
	if len(v.cfg.Types) > 0 {
		typ := ""
		if hdr.Typ != nil {
			typ = strings.TrimPrefix(strings.ToLower(*hdr.Typ), "application/")
		}
		if !slices.ContainsFunc(v.cfg.Types, func(t string) bool { return strings.TrimPrefix(strings.ToLower(t), "application/") == typ }) {
			return &TokenError{Reason: ReasonType, Description: fmt.Sprintf("the token's type (typ %q) is not one of %v", typ, v.cfg.Types)}
		}
	}
	if v.cfg.MaxLifetime > 0 && claims.Exp != nil {
		from := float64(v.cfg.Now().Unix())
		if claims.Iat != nil {
			from = *claims.Iat
		}
		if life := time.Duration((*claims.Exp - from) * float64(time.Second)); life > v.cfg.MaxLifetime {
			return &TokenError{Reason: ReasonLifetime, Description: fmt.Sprintf("the token is valid for %v, longer than the %v allowed", life.Round(time.Second), v.cfg.MaxLifetime)}
		}
	}
	return nil
}

// Reasons of a TokenError.
const (
	ReasonTooLarge     = "too_large"     // over MaxTokenBytes
	ReasonCritical     = "crit"          // a "crit" header (RFC 7515 section 4.1.11)
	ReasonLifetime     = "lifetime"      // exp more than Config.MaxLifetime after iat (or now)
	ReasonType         = "bad_type"      // typ not one of Config.Types
	ReasonMalformed    = "malformed"     // not a compact JWS, or undecodable header or claims
	ReasonAlgorithm    = "bad_algorithm" // alg none, HMAC or another algorithm not allowed
	ReasonSignature    = "bad_signature" // the signature does not verify with the key
	ReasonUnknownKey   = "unknown_key"   // no key of the set matches (kid, alg, key type)
	ReasonExpired      = "expired"       // exp in the past (beyond the leeway), or no exp
	ReasonNotYetValid  = "not_yet_valid" // nbf or iat in the future (beyond the leeway)
	ReasonIssuer       = "bad_issuer"    // iss is not Config.Issuer
	ReasonAudience     = "bad_audience"  // aud does not contain Config.Audience
	ReasonNoCustomer   = "no_customer"   // the customer claim is absent, empty or not a string
	ReasonInvalidOther = "invalid"       // any other failure
)

// TokenError is a token Verify refused. Reason is one of the Reason*
// constants; Description is for the client (RFC 6750 error_description:
// it says what is wrong without echoing the token); Err is the library's
// error, for logs.
type TokenError struct {
	Reason      string
	Description string
	Err         error
}

func (e *TokenError) Error() string {
	if e.Err != nil {
		return "authn: " + e.Description + ": " + e.Err.Error()
	}
	return "authn: " + e.Description
}

func (e *TokenError) Unwrap() error { return e.Err }

// tokenError classifies an error of jwt.Parser.
func tokenError(err error) *TokenError {
	te := func(reason, desc string) *TokenError { return &TokenError{Reason: reason, Description: desc, Err: err} }
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return te(ReasonMalformed, "the token is not a well-formed JWT")
	case strings.Contains(err.Error(), "signing method"): // not allowed (none, HS256...) or unknown
		return te(ReasonAlgorithm, "the token's signing algorithm is not accepted")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return te(ReasonSignature, "the token's signature does not verify")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return te(ReasonUnknownKey, "no key verifies the token (unknown kid, or a key of another type or algorithm)")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && strings.Contains(err.Error(), "exp"):
		return te(ReasonExpired, "the token has no expiry (exp)")
	case errors.Is(err, jwt.ErrTokenExpired):
		return te(ReasonExpired, "the token has expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return te(ReasonNotYetValid, "the token is not valid yet")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return te(ReasonIssuer, "the token's issuer is not the one this server trusts")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return te(ReasonAudience, "the token is not for this audience")
	}
	return te(ReasonInvalidOther, "the token is invalid")
}

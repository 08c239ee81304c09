package checkout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
)

// Codes of authentication, authorization and rate limiting.
const (
	// CodeUnauthorized: a bearer token is needed and missing (an order
	// naming a customer, any order with Config.AuthRequired, GET of a
	// customer's order), or the token is invalid (signature, algorithm,
	// issuer, audience, expiry, customer claim). HTTP 401 with a
	// WWW-Authenticate: Bearer challenge (RFC 6750 section 3; error
	// "invalid_token" when a token was sent).
	CodeUnauthorized = "unauthorized"
	// CodeBadAuthorization: the Authorization header is repeated, empty,
	// of another scheme than Bearer (Basic, a bare JWT), or "Bearer"
	// without a token. HTTP 400 with WWW-Authenticate error
	// "invalid_request" (RFC 6750 section 3.1).
	CodeBadAuthorization = "bad_authorization"
	// CodeCustomerMismatch: the body's customerId is not the token's
	// customer. HTTP 403; nothing is recorded.
	CodeCustomerMismatch = "customer_mismatch"
	// CodeForbidden: GET /orders/{id} of an order of another customer than
	// the token's. HTTP 403.
	CodeForbidden = "forbidden"
	// CodeRateLimited: the client (the token's customer, else the client
	// IP) sent more than Config.RateLimit requests per second beyond its
	// burst. HTTP 429 with Retry-After (whole seconds, at least 1).
	CodeRateLimited = "rate_limited"
)

// AuthRealm is the realm of checkout's WWW-Authenticate challenges.
const AuthRealm = "ordercast"

// principal is who a request comes from: the token's customer, or "" for
// an anonymous request (a guest, or any request without Config.Auth).
type principal struct {
	customer string
}

// admit applies the rate limit and authenticates r. A request is charged
// to its source (the client address: IPv4 by address, IPv6 by its /64)
// before any bearer token is verified, so that a client sending tokens past
// its limit costs no signature check; a token that verifies moves the charge
// from its source to its customer, so a valid token is limited as its
// customer and anything else (no token, an invalid one) as its source. It
// answers 400 bad_authorization, 401 unauthorized (a token was sent and is
// invalid; a missing one is for the caller to judge) or 429 rate_limited.
func (s *Service) admit(w http.ResponseWriter, r *http.Request) (principal, *apiError) {
	now := s.now()
	src, wait, ok := s.limits.reserve(sourceKey(clientIP(r)), now)
	if !ok {
		return principal{}, s.rateLimited(w, wait)
	}
	p, authErr := s.authenticate(r)
	if authErr == nil && p.customer != "" {
		if src != nil {
			src.CancelAt(now) // the token verified: its customer pays instead
		}
		if _, wait, ok := s.limits.reserve("customer:"+p.customer, now); !ok {
			return p, s.rateLimited(w, wait)
		}
	}
	return p, authErr
}

// rateLimited is the 429 answer, with Retry-After in whole seconds (at
// least 1).
func (s *Service) rateLimited(w http.ResponseWriter, wait time.Duration) *apiError {
	secs := max(int(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return reject(http.StatusTooManyRequests, CodeRateLimited, fmt.Sprintf(
		"too many requests from this client (more than %g per second); retry after %d s", s.cfg.RateLimit, secs))
}

// sourceKey is the rate limit bucket of a client address: an IPv4 address
// alone, an IPv6 address by its /64 (one subscriber's allocation, RFC 6177:
// a client owning a /64 would otherwise have 2^64 buckets).
func sourceKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "ip:" + ip
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return "ip:" + p.String()
	}
	return "ip:" + a.String()
}

// authenticate reads the Authorization header: no header is an anonymous
// principal; a Bearer token is verified; anything else (repeated, empty,
// another scheme such as Basic, a token without "Bearer ", "Bearer" alone)
// is 400 bad_authorization.
func (s *Service) authenticate(r *http.Request) (principal, *apiError) {
	if s.cfg.Auth == nil {
		return principal{}, nil
	}
	vals := r.Header.Values("Authorization")
	switch {
	case len(vals) == 0:
		return principal{}, nil
	case len(vals) > 1:
		return principal{}, badAuthorization("the Authorization header is repeated; send one")
	}
	scheme, tok, _ := strings.Cut(strings.TrimSpace(vals[0]), " ")
	switch {
	case scheme == "":
		return principal{}, badAuthorization("the Authorization header is empty; send Authorization: Bearer <JWT>, or no Authorization header to order as a guest")
	case !strings.EqualFold(scheme, "Bearer"):
		// Credentials of another scheme (Basic, a bare JWT) are refused
		// rather than taken for a guest, so that a client sending the
		// wrong credentials learns it instead of ordering anonymously.
		// Nothing of the header is echoed: it may be a credential.
		return principal{}, badAuthorization("the Authorization header is not a bearer token (another scheme, or a token without \"Bearer \"): send Authorization: Bearer <JWT>, or no Authorization header to order as a guest")
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return principal{}, badAuthorization("the Authorization header is \"Bearer\" without a token")
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DBTimeout)
	defer cancel()
	customer, err := s.cfg.Auth.Verify(ctx, tok)
	if err != nil {
		desc := "the bearer token is invalid"
		var te *authn.TokenError
		if errors.As(err, &te) {
			desc = te.Description
		}
		s.metrics.authFailures.WithLabelValues(tokenReason(err)).Inc()
		s.log.InfoContext(ctx, "checkout: bearer token refused", slog.String("reason", tokenReason(err)), slog.Any("error", err))
		return principal{}, invalidToken(desc)
	}
	if !validCustomerID(customer) {
		s.metrics.authFailures.WithLabelValues(authn.ReasonNoCustomer).Inc()
		return principal{}, invalidToken(fmt.Sprintf("the token's customer %q is not a customer id (1 to %d characters of A-Z, a-z, 0-9, '_' and '-')",
			truncate(customer, 80), MaxCustomerIDLen))
	}
	return principal{customer: customer}, nil
}

func tokenReason(err error) string {
	var te *authn.TokenError
	if errors.As(err, &te) {
		return te.Reason
	}
	return authn.ReasonInvalidOther
}

func badAuthorization(msg string) *apiError {
	return authError(http.StatusBadRequest, CodeBadAuthorization, "invalid_request", msg, msg)
}

func invalidToken(desc string) *apiError {
	return authError(http.StatusUnauthorized, CodeUnauthorized, "invalid_token", desc, desc+"; send a valid bearer token (Authorization: Bearer <JWT>)")
}

// needToken is the 401 of a request that must carry a token and has none.
func needToken(why string) *apiError {
	return authError(http.StatusUnauthorized, CodeUnauthorized, "", "", why+": send Authorization: Bearer <JWT> (a token whose subject is the customer)")
}

// authError is an answer with a WWW-Authenticate challenge (RFC 6750
// section 3): the realm, and the error and error_description when a token
// was sent (errCode non-empty).
func authError(status int, code, errCode, desc, message string) *apiError {
	e := reject(status, code, message)
	e.challenge = `Bearer realm="` + AuthRealm + `"`
	if errCode != "" {
		e.challenge += `, error="` + errCode + `", error_description="` + quoteSafe(desc) + `"`
	}
	return e
}

// quoteSafe keeps the characters RFC 6750 allows in error_description
// (%x20-21 / %x23-5B / %x5D-7E: no '"' nor '\').
func quoteSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '\''
		}
		return r
	}, s)
}

// clientIP is the host of r.RemoteAddr: the peer's address. A proxy's
// X-Forwarded-For is not trusted (it is the client's to write); behind a
// proxy every client shares the proxy's limit.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// maxClients bounds the rate limiters kept; past it the idle ones (whose
// bucket is full again, so forgetting them changes nothing) are dropped,
// then those with a token left; the throttled ones are kept, and while
// they fill the map new clients share one bucket.
const maxClients = 100_000

// clientLimits is the per-client token buckets (golang.org/x/time/rate).
// Safe for concurrent use.
type clientLimits struct {
	limit rate.Limit // 0: no limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	swept time.Time
	// overflow is shared by new clients while the map is full of
	// throttled ones (see reserve).
	overflow *rate.Limiter
}

func newClientLimits(perSecond float64, burst int) *clientLimits {
	return &clientLimits{limit: rate.Limit(perSecond), burst: burst, m: map[string]*rate.Limiter{}}
}

// reserve takes one token of key's bucket at now, or says how long until
// one is there (and takes none). The reservation may be cancelled (CancelAt)
// to give the token back; with no limit it is nil.
func (c *clientLimits) reserve(key string, now time.Time) (*rate.Reservation, time.Duration, bool) {
	if c.limit == 0 {
		return nil, 0, true
	}
	c.mu.Lock()
	lim, ok := c.m[key]
	if !ok {
		if len(c.m) >= maxClients || now.Sub(c.swept) > time.Minute {
			c.sweep(now)
		}
		lim = rate.NewLimiter(c.limit, c.burst)
		if len(c.m) < maxClients {
			c.m[key] = lim
		} else {
			lim = c.overflowLocked() // every bucket kept is throttled: new clients share one
		}
	}
	c.mu.Unlock()
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return nil, d, false
	}
	return res, 0, true
}

// overflowLocked is the one bucket new clients share while maxClients
// throttled clients fill the map; c.mu is held.
func (c *clientLimits) overflowLocked() *rate.Limiter {
	if c.overflow == nil {
		c.overflow = rate.NewLimiter(c.limit, c.burst)
	}
	return c.overflow
}

// sweep drops the limiters whose bucket is full at now; c.mu is held.
func (c *clientLimits) sweep(now time.Time) {
	c.swept = now
	for k, l := range c.m {
		if l.TokensAt(now) >= float64(c.burst) {
			delete(c.m, k)
		}
	}
	if len(c.m) >= maxClients {
		// Next the clients with a token left (not throttled: forgetting
		// them only gives them a fresh burst). A throttled client is
		// never forgotten, or a flood of new addresses would free it.
		for k, l := range c.m {
			if l.TokensAt(now) >= 1 {
				delete(c.m, k)
			}
		}
	}
}

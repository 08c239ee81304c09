package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The operator session and the protections of the console's actions:
//
//   - POST /console/login with the operator token (Config.Token, compared
//     in constant time) sets the cookie "ordercast_console": an expiry
//     (sessionTTL), a random nonce and an HMAC-SHA256 of both keyed by the
//     token. HttpOnly, SameSite=Strict, Path=/console, Secure when the
//     request came over TLS. Changing the token ends every session.
//   - Every action (replay, purge, offset reset, logout) is a POST that
//     needs a valid session cookie AND the form field "csrf", an HMAC of
//     the cookie keyed by the token, which only the console's own pages
//     carry (the synchronizer token pattern, OWASP CSRF Prevention Cheat
//     Sheet). A POST whose Origin header (or, without one, Sec-Fetch-Site)
//     says it comes from another site is refused before anything else.
//   - Without a token the console is read-only: no action is offered, and
//     every POST is refused 403.
//
// Every response carries securityHeaders: a Content-Security-Policy that
// allows only the console's own stylesheet and images (no script at all,
// no inline style), frame-ancestors 'none' against clickjacking, nosniff,
// no referrer to other sites, no caching.

const (
	cookieName = "ordercast_console"
	sessionTTL = 12 * time.Hour
)

type auth struct {
	token []byte
}

func newAuth(token string) *auth { return &auth{token: []byte(token)} }

func (a *auth) enabled() bool { return len(a.token) > 0 }

func (a *auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.token)
	m.Write([]byte(strings.Join(parts, "|")))
	return hex.EncodeToString(m.Sum(nil))
}

// newSession returns a new session cookie value.
func (a *auth) newSession(now time.Time) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	exp := strconv.FormatInt(now.Add(sessionTTL).Unix(), 10)
	nonce := hex.EncodeToString(b)
	return exp + "." + nonce + "." + a.mac("session", exp, nonce)
}

// session returns the request's valid session cookie value, or "".
func (a *auth) session(r *http.Request) string {
	if !a.enabled() {
		return ""
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return ""
	}
	parts := strings.Split(ck.Value, ".")
	if len(parts) != 3 {
		return ""
	}
	exp, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || time.Now().Unix() > exp {
		return ""
	}
	if !hmac.Equal([]byte(parts[2]), []byte(a.mac("session", parts[0], parts[1]))) {
		return ""
	}
	return ck.Value
}

// operator reports whether r carries a valid operator session.
func (a *auth) operator(r *http.Request) bool { return a.session(r) != "" }

// csrf returns the CSRF token of r's session ("" without one).
func (a *auth) csrf(r *http.Request) string {
	s := a.session(r)
	if s == "" {
		return ""
	}
	return a.mac("csrf", s)
}

// checkToken compares a login attempt with the token in constant time.
func (a *auth) checkToken(t string) bool {
	return a.enabled() && subtle.ConstantTimeCompare([]byte(t), a.token) == 1
}

// sameOrigin reports whether a POST comes from the console's own origin.
// A browser's Sec-Fetch-Site (Fetch Metadata) decides when present:
// same-origin, or none (typed by the user); else the Origin header must
// name r's host. A request with neither is not from a browser, and passes
// (the session and CSRF checks still apply).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}

// action checks that r may act: same origin, an operator session and its
// CSRF token. It returns the HTTP status to refuse with, or 0.
func (a *auth) action(r *http.Request) int {
	if !sameOrigin(r) {
		return http.StatusForbidden
	}
	want := a.csrf(r)
	if want == "" {
		return http.StatusForbidden
	}
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(want)) {
		return http.StatusForbidden
	}
	return 0
}

// setSession sets the session cookie (value "" clears it).
func setSession(w http.ResponseWriter, r *http.Request, value string) {
	ck := &http.Cookie{Name: cookieName, Value: value, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
	if value == "" {
		ck.MaxAge = -1
	} else {
		ck.MaxAge = int(sessionTTL / time.Second)
	}
	http.SetCookie(w, ck)
}

// contentSecurityPolicy allows the console's own stylesheet and images
// only: no script, no inline style, no framing, forms posting to itself.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

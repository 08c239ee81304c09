package authn_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
)

// The dev key is made once, 0600 in a 0700 directory, and every loader,
// concurrent ones included, gets the same key: a token of one verifies
// with another.
func TestDevKeyCreatedOnceAndPrivate(t *testing.T) {
	path := authn.DevKeyPath(filepath.Join(t.TempDir(), "data"))
	keys := make([]*authn.DevKey, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := authn.LoadOrCreateDevKey(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v mode %v, want 0600", err, fi.Mode())
	}
	if di, err := os.Stat(filepath.Dir(path)); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("key directory mode %v, want 0700", di.Mode())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("%d files in the key directory, want the key only (no temporary left)", len(ents))
	}
	tok, err := keys[0].Token("17850", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		v, err := k.Verifier(0)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := v.Verify(t.Context(), tok); err != nil || c != "17850" {
			t.Fatalf("loader %d: Verify = %q, %v; want 17850 (one key for all)", i, c, err)
		}
	}
	// Readable by others: refused.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := authn.LoadDevKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("LoadDevKey of a 0644 key: %v, want a refusal naming chmod 600", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// Its directory writable by group or others: refused, by both loaders.
	dir := filepath.Dir(path)
	for _, mode := range []os.FileMode{0o770, 0o702} {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		for name, load := range map[string]func(string) (*authn.DevKey, error){"LoadDevKey": authn.LoadDevKey, "LoadOrCreateDevKey": authn.LoadOrCreateDevKey} {
			if _, err := load(path); err == nil || !strings.Contains(err.Error(), "chmod 700") {
				t.Fatalf("%s with its directory %v: %v, want a refusal naming chmod 700", name, mode, err)
			}
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := authn.LoadDevKey(path); err != nil {
		t.Fatalf("LoadDevKey after the fixes: %v", err)
	}
	// Owned by another user: refused (chown needs root).
	if os.Geteuid() == 0 {
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := authn.LoadDevKey(path); err == nil || !strings.Contains(err.Error(), "not by the current user") {
			t.Fatalf("LoadDevKey of a key owned by uid 65534: %v, want a refusal naming the owner", err)
		}
	} else {
		t.Log("not root: the foreign owner case is not exercised (chown needs root)")
	}
	if _, err := authn.LoadDevKey(filepath.Join(t.TempDir(), "none.pem")); !errors.Is(err, authn.ErrNoDevKey) {
		t.Fatalf("LoadDevKey of a missing file: %v, want ErrNoDevKey", err)
	}
}

// A key file may be a JWK Set or PEM; private material is refused.
func TestKeyFile(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	der, _ := x509.MarshalPKIXPublicKey(pub)
	pemFile := write("pub.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
	x := base64.RawURLEncoding.EncodeToString(pub)
	jwksFile := write("jwks.json", `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"`+x+`","kid":"k1","alg":"EdDSA","use":"sig"}]}`)
	tok := func(kid string) string {
		tk := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "c1", "exp": time.Now().Add(time.Minute).Unix()})
		if kid != "" {
			tk.Header["kid"] = kid
		}
		s, err := tk.SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, f := range []string{pemFile, jwksFile} {
		keys, err := authn.KeyFile(f)
		if err != nil {
			t.Fatalf("KeyFile(%s): %v", f, err)
		}
		v, err := authn.New(authn.Config{Keys: keys, Issuer: "i", Audience: "a", Algorithms: []string{"EdDSA"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, kid := range []string{"", "k1"} {
			want := kid == "" || f == jwksFile // a PEM key's kid is its thumbprint
			c, err := v.Verify(t.Context(), tok(kid))
			if (err == nil) != want || (want && c != "c1") {
				t.Fatalf("%s, kid %q: Verify = %q, %v; want accepted %v", filepath.Base(f), kid, c, err, want)
			}
		}
	}
	privDER, _ := x509.MarshalPKCS8PrivateKey(priv)
	for name, data := range map[string]string{
		"private.pem":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER})),
		"private.json": `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","d":"` + base64.RawURLEncoding.EncodeToString(priv.Seed()) + `"}]}`,
		"hmac.json":    `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
		"empty.pem":    "",
	} {
		if _, err := authn.KeyFile(write(name, data)); err == nil {
			t.Errorf("KeyFile(%s) accepted, want a refusal", name)
		}
	}
}

// Configuration refuses none, HMAC and unbounded skew.
func TestConfigRefusals(t *testing.T) {
	keys := func(*jwt.Token) (any, error) { return nil, errors.New("unused") }
	for _, c := range []authn.Config{
		{Keys: keys, Issuer: "i", Audience: "a", Algorithms: []string{"none"}},
		{Keys: keys, Issuer: "i", Audience: "a", Algorithms: []string{"HS256"}},
		{Keys: keys, Issuer: "i", Audience: "a", Leeway: time.Hour},
		{Keys: keys, Audience: "a"},
		{Keys: keys, Issuer: "i"},
		{Issuer: "i", Audience: "a"},
	} {
		if _, err := authn.New(c); err == nil {
			t.Errorf("New(%+v) accepted, want an error", c)
		}
	}
}

// A JWKS URL is fetched at start (a failure is an error then, not at every
// request) and its keys verify tokens by kid.
func TestJWKS(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	x := base64.RawURLEncoding.EncodeToString(pub)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/jwks.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"k1","alg":"EdDSA","use":"sig"}]}`))
	}))
	defer srv.Close()
	if _, err := authn.JWKS(t.Context(), srv.URL+"/missing", time.Second); err == nil {
		t.Fatal("JWKS of a 404 URL accepted at start, want an error")
	}
	keys, err := authn.JWKS(t.Context(), srv.URL+"/jwks.json", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	v, err := authn.New(authn.Config{Keys: keys, Issuer: "i", Audience: "a", Algorithms: []string{"EdDSA"}})
	if err != nil {
		t.Fatal(err)
	}
	tk := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": "i", "aud": []string{"x", "a"}, "sub": "c1", "exp": time.Now().Add(time.Minute).Unix()})
	tk.Header["kid"] = "k1"
	s, _ := tk.SignedString(priv)
	if c, err := v.Verify(t.Context(), s); err != nil || c != "c1" {
		t.Fatalf("Verify = %q, %v; want c1", c, err)
	}
}

// BenchmarkVerifyDev is the cost checkout adds to a request with a dev
// token (Ed25519 verification and claim checks).
func BenchmarkVerifyDev(b *testing.B) {
	k, err := authn.LoadOrCreateDevKey(authn.DevKeyPath(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	v, _ := k.Verifier(0)
	tok, _ := k.Token("17850", time.Hour, time.Now())
	for b.Loop() {
		if _, err := v.Verify(b.Context(), tok); err != nil {
			b.Fatal(err)
		}
	}
}

// TestVerifyCache: a token verified once is accepted again without its
// signature checked (the key set is not consulted), but only the very same
// bytes, only until CacheTTL or its expiry, whichever comes first, and
// never a refusal; with the cache off every call checks.
func TestVerifyCache(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	t0 := time.Now().Truncate(time.Second)
	now := t0
	var mu sync.Mutex
	lookups, keyGone := 0, false
	keys := func(*jwt.Token) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		if keyGone {
			return nil, errors.New("no such key (rotated out)")
		}
		return pub, nil
	}
	sign := func(sub string, exp time.Time) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": "i", "aud": "a", "sub": sub, "iat": t0.Unix(), "exp": exp.Unix()}).SignedString(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	newV := func(size int) *authn.Verifier {
		v, err := authn.New(authn.Config{Keys: keys, Issuer: "i", Audience: "a", Algorithms: []string{"EdDSA"},
			Leeway: time.Second, CacheSize: size, CacheTTL: time.Minute, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	verify := func(v *authn.Verifier, tok string) (string, int, error) {
		mu.Lock()
		before := lookups
		mu.Unlock()
		c, err := v.Verify(t.Context(), tok)
		mu.Lock()
		defer mu.Unlock()
		return c, lookups - before, err
	}

	v := newV(0)
	long := sign("c1", t0.Add(time.Hour))
	if c, n, err := verify(v, long); err != nil || c != "c1" || n != 1 {
		t.Fatalf("first Verify = %q, %v, %d key lookups; want c1, checked", c, err, n)
	}
	if c, n, err := verify(v, long); err != nil || c != "c1" || n != 0 {
		t.Fatalf("second Verify = %q, %v, %d key lookups; want c1 from the cache", c, err, n)
	}
	// The same claims with a forged signature: other bytes, checked, refused.
	forged := long[:strings.LastIndexByte(long, '.')+1] + base64.RawURLEncoding.EncodeToString(make([]byte, ed25519.SignatureSize))
	if _, n, err := verify(v, forged); err == nil || n != 1 {
		t.Fatalf("forged signature: %v, %d key lookups; want refused after a check", err, n)
	}
	// Past CacheTTL the token is checked again: a key rotated out refuses it.
	mu.Lock()
	keyGone = true
	mu.Unlock()
	now = t0.Add(59 * time.Second)
	if _, n, err := verify(v, long); err != nil || n != 0 {
		t.Fatalf("within CacheTTL: %v, %d lookups; want accepted from the cache", err, n)
	}
	now = t0.Add(61 * time.Second)
	if _, n, err := verify(v, long); err == nil || n != 1 {
		t.Fatalf("past CacheTTL with its key gone: %v, %d lookups; want refused after a check", err, n)
	}
	// A refusal is not cached: the key back, the token is accepted.
	mu.Lock()
	keyGone = false
	mu.Unlock()
	if _, n, err := verify(v, long); err != nil || n != 1 {
		t.Fatalf("key back: %v, %d lookups; want accepted after a check", err, n)
	}
	// A token expiring within CacheTTL leaves the cache at exp + Leeway.
	now = t0
	short := sign("c2", t0.Add(10*time.Second))
	if _, _, err := verify(v, short); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(10*time.Second + 500*time.Millisecond) // within the leeway
	if c, n, err := verify(v, short); err != nil || c != "c2" || n != 0 {
		t.Fatalf("within exp+leeway: %q, %v, %d lookups; want c2 from the cache", c, err, n)
	}
	now = t0.Add(12 * time.Second)
	var te *authn.TokenError
	if _, _, err := verify(v, short); !errors.As(err, &te) || te.Reason != authn.ReasonExpired {
		t.Fatalf("past exp+leeway: %v; want %s", err, authn.ReasonExpired)
	}
	// CacheSize < 0: every call checks.
	now = t0
	off := newV(-1)
	for i := 0; i < 2; i++ {
		if _, n, err := verify(off, long); err != nil || n != 1 {
			t.Fatalf("cache off, call %d: %v, %d lookups; want a check each time", i, err, n)
		}
	}
	if _, err := authn.New(authn.Config{Keys: keys, Issuer: "i", Audience: "a", CacheTTL: 2 * time.Hour}); err == nil {
		t.Error("CacheTTL 2h accepted, want an error")
	}
}

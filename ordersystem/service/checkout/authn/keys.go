package authn

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/ordercast/ordercast/ordersystem/internal/jsonlimit"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// JWKS returns the key set published at rawURL (an identity provider's
// jwks_uri, RFC 7517 section 5), fetched once now and then refreshed every
// hour, and at most every 5 minutes when a token names a kid the set does
// not have. The first fetch must succeed within timeout (0: 10 s), so that
// a wrong URL stops the start rather than every request. The refreshing
// stops when ctx ends. Errors name the URL.
func JWKS(ctx context.Context, rawURL string, timeout time.Duration) (jwt.Keyfunc, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("authn: JWKS URL %q: want an http(s) URL such as https://idp.example/.well-known/jwks.json", rawURL)
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	fail := false
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{rawURL}, keyfunc.Override{
		Client:                    &http.Client{Timeout: timeout},
		HTTPTimeout:               timeout,
		NoErrorReturnFirstHTTPReq: &fail,
	})
	if err != nil {
		return nil, fmt.Errorf("authn: JWKS %s: %w", rawURL, err)
	}
	return kf.KeyfuncCtx(ctx), nil
}

// KeyFile reads the verification keys from path: a JWK Set (JSON, RFC 7517
// section 5) or PEM blocks of public keys (PKIX "PUBLIC KEY", PKCS#1 "RSA
// PUBLIC KEY") or certificates, RSA, ECDSA or Ed25519. A PEM key's kid is
// its RFC 7638 thumbprint, but a token without a kid is tried against every
// key. Private key material is refused: the verifier needs only public
// keys. Errors name the file.
func KeyFile(path string) (jwt.Keyfunc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("authn: key file: %w", err)
	}
	if t := strings.TrimSpace(string(data)); strings.HasPrefix(t, "{") {
		var set jwkset.JWKSMarshal
		if err := jsonlimit.Unmarshal(data, &set, 0); err != nil { // 32 levels at most, no member twice
			return nil, fmt.Errorf("authn: key file %s: not a JWK Set: %w", path, err)
		}
		for _, k := range set.Keys {
			if k.D != "" || k.K != "" {
				return nil, fmt.Errorf("authn: key file %s: key %q holds private or symmetric key material; give only public keys", path, k.KID)
			}
		}
		if len(set.Keys) == 0 {
			return nil, fmt.Errorf("authn: key file %s: the JWK Set has no keys", path)
		}
		kf, err := keyfunc.NewJWKSetJSON(data)
		if err != nil {
			return nil, fmt.Errorf("authn: key file %s: %w", path, err)
		}
		return kf.Keyfunc, nil
	}
	var keys []crypto.PublicKey
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		var k any
		switch b.Type {
		case "PUBLIC KEY":
			k, err = x509.ParsePKIXPublicKey(b.Bytes)
		case "RSA PUBLIC KEY":
			k, err = x509.ParsePKCS1PublicKey(b.Bytes)
		case "CERTIFICATE":
			var c *x509.Certificate
			if c, err = x509.ParseCertificate(b.Bytes); err == nil {
				k = c.PublicKey
			}
		default:
			if strings.Contains(b.Type, "PRIVATE") {
				return nil, fmt.Errorf("authn: key file %s: a %s block: give the public key only (openssl pkey -pubout)", path, b.Type)
			}
			return nil, fmt.Errorf("authn: key file %s: a PEM block of type %q; want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", path, b.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("authn: key file %s: %s block: %w", path, b.Type, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("authn: key file %s: no PEM public key nor JWK Set in it", path)
	}
	return keySet(keys...)
}

// keySet returns a jwt.Keyfunc over keys, each with its RFC 7638
// thumbprint as kid.
func keySet(keys ...crypto.PublicKey) (jwt.Keyfunc, error) {
	store := jwkset.NewMemoryStorage()
	for _, k := range keys {
		kid, err := Thumbprint(k)
		if err != nil {
			return nil, err
		}
		j, err := jwkset.NewJWKFromKey(k, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig}})
		if err != nil {
			return nil, fmt.Errorf("authn: key %s: %w", kid, err)
		}
		if err := store.KeyWrite(context.Background(), j); err != nil {
			return nil, err
		}
	}
	kf, err := keyfunc.New(keyfunc.Options{Storage: store})
	if err != nil {
		return nil, err
	}
	return kf.Keyfunc, nil
}

// Thumbprint returns the RFC 7638 JWK thumbprint (SHA-256, base64url) of
// an RSA, ECDSA (P-256, P-384, P-521) or Ed25519 public key.
func Thumbprint(k crypto.PublicKey) (string, error) {
	b64 := base64.RawURLEncoding.EncodeToString
	var members string
	switch k := k.(type) {
	case *rsa.PublicKey:
		e := big(k.E)
		members = fmt.Sprintf(`{"e":%q,"kty":"RSA","n":%q}`, b64(e), b64(k.N.Bytes()))
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		raw, err := k.Bytes() // uncompressed point 0x04 || X || Y
		if err != nil {
			return "", fmt.Errorf("authn: ECDSA key: %w", err)
		}
		members = fmt.Sprintf(`{"crv":%q,"kty":"EC","x":%q,"y":%q}`, k.Curve.Params().Name, b64(raw[1:1+size]), b64(raw[1+size:]))
	case ed25519.PublicKey:
		members = fmt.Sprintf(`{"crv":"Ed25519","kty":"OKP","x":%q}`, b64(k))
	default:
		return "", errors.New("authn: unsupported public key type " + fmt.Sprintf("%T", k) + "; want RSA, ECDSA or Ed25519")
	}
	sum := sha256.Sum256([]byte(members))
	return b64(sum[:]), nil
}

// big returns the big-endian bytes of a positive int without leading zeros.
func big(v int) []byte {
	var out []byte
	for ; v > 0; v >>= 8 {
		out = append([]byte{byte(v)}, out...)
	}
	return out
}

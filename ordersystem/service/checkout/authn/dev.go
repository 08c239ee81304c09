package authn

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The claims of development tokens (--auth dev): what DevKey.Token signs
// and DevKey.Verifier requires.
const (
	DevIssuer    = "ordercast-dev"
	DevAudience  = "ordercast-checkout"
	DevAlgorithm = "EdDSA" // Ed25519, RFC 8037
	// DevTokenTTL is the default lifetime of a development token: 1 hour.
	DevTokenTTL = time.Hour
	// DevKeyFile is the development key's file name inside its data
	// directory (DevKeyPath).
	DevKeyFile = "dev-signing-key.pem"
)

// DevKeyPath is where the development signing key of a data directory is
// kept: <dataDir>/auth/dev-signing-key.pem.
func DevKeyPath(dataDir string) string { return filepath.Join(dataDir, "auth", DevKeyFile) }

// DevKey is the development signing key: an Ed25519 key that `ordercast up
// --auth dev` keeps in its data directory, and with which `ordercast token`,
// the replay and the load generator sign tokens for any customer. Whoever
// can read the file can order as anyone: it is a test fixture, not a
// production credential. Safe for concurrent use.
type DevKey struct {
	path string
	priv ed25519.PrivateKey
	kid  string
}

// ErrNoDevKey is returned by LoadDevKey when the file does not exist.
var ErrNoDevKey = errors.New("authn: no development signing key")

// LoadOrCreateDevKey loads the development key at path, creating it first
// if it does not exist: a new Ed25519 key in PKCS#8 PEM, mode 0600, in a
// directory made 0700. Two processes creating it at once end up with the
// same key (the file is linked into place atomically; the loser reads the
// winner's). Errors name the path.
func LoadOrCreateDevKey(path string) (*DevKey, error) {
	k, err := LoadDevKey(path)
	if !errors.Is(err, ErrNoDevKey) {
		return k, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("authn: development key %s: %w", path, err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dev-key-*")
	if err != nil {
		return nil, fmt.Errorf("authn: development key %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600 already; Chmod says so for the reader.
	err = tmp.Chmod(0o600)
	if err == nil {
		err = pem.Encode(tmp, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("authn: development key %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("authn: development key %s: %w", path, err)
	}
	return LoadDevKey(path)
}

// LoadDevKey loads the development key at path: ErrNoDevKey (wrapped, with
// the path) if there is none, another error (saying how to fix it) if its
// directory is writable by group or others (anyone who may write there may
// replace the key), if the file is not owned by the current user, is
// readable by others than its owner, or is not an Ed25519 PKCS#8 PEM key.
// Ownership is checked on Unix only.
func LoadDevKey(path string) (*DevKey, error) {
	dir := filepath.Dir(path)
	if di, err := os.Stat(dir); err == nil && di.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("authn: development key directory %s has mode %v: it must be writable by its owner only, or others may replace the key (chmod 700 %s)", dir, di.Mode().Perm(), dir)
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", ErrNoDevKey, path)
	}
	if err != nil {
		return nil, fmt.Errorf("authn: development key: %w", err)
	}
	if uid, foreign := foreignOwner(fi); foreign {
		return nil, fmt.Errorf("authn: development key %s is owned by uid %d, not by the current user (uid %d): chown it to this user, or remove it to have a new one made", path, uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("authn: development key %s has mode %v: it must be readable by its owner only (chmod 600)", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("authn: development key: %w", err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("authn: development key %s is not a PEM PRIVATE KEY; remove it to have a new one made", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	priv, ok := k.(ed25519.PrivateKey)
	if err != nil || !ok {
		return nil, fmt.Errorf("authn: development key %s is not an Ed25519 key; remove it to have a new one made", path)
	}
	kid, err := Thumbprint(priv.Public())
	if err != nil {
		return nil, err
	}
	return &DevKey{path: path, priv: priv, kid: kid}, nil
}

// Path is the key's file.
func (k *DevKey) Path() string { return k.path }

// Keys is the key set of the development key: its public key, kid its
// thumbprint; for Config.Keys.
func (k *DevKey) Keys() jwt.Keyfunc {
	kf, err := keySet(k.priv.Public())
	if err != nil { // cannot happen: an Ed25519 key always converts
		panic(err)
	}
	return kf
}

// Verifier returns the Verifier of development tokens: DevIssuer,
// DevAudience, DevAlgorithm only, customer in "sub", with leeway (0: the
// default).
func (k *DevKey) Verifier(leeway time.Duration) (*Verifier, error) {
	return New(Config{Keys: k.Keys(), Issuer: DevIssuer, Audience: DevAudience, Algorithms: []string{DevAlgorithm}, Leeway: leeway})
}

// Token signs a development token for customer valid for ttl from now
// (iss DevIssuer, aud DevAudience, sub customer, iat, exp; header kid).
func (k *DevKey) Token(customer string, ttl time.Duration, now time.Time) (string, error) {
	if customer == "" {
		return "", errors.New("authn: a token needs a customer id")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("authn: token lifetime %v: want > 0", ttl)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{
		Issuer:    DevIssuer,
		Audience:  jwt.ClaimStrings{DevAudience},
		Subject:   customer,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	})
	t.Header["kid"] = k.kid
	return t.SignedString(k.priv)
}

// Tokens returns a function that gives a development token for a customer,
// signing one per customer and reusing it until a quarter of ttl (0:
// DevTokenTTL) is left: for clients that send many requests (the replay,
// the load generator). Safe for concurrent use.
func (k *DevKey) Tokens(ttl time.Duration) func(customer string) (string, error) {
	if ttl <= 0 {
		ttl = DevTokenTTL
	}
	type entry struct {
		tok   string
		renew time.Time
	}
	var mu sync.Mutex
	cache := map[string]entry{}
	return func(customer string) (string, error) {
		now := time.Now()
		mu.Lock()
		e, ok := cache[customer]
		mu.Unlock()
		if ok && now.Before(e.renew) {
			return e.tok, nil
		}
		tok, err := k.Token(customer, ttl, now)
		if err != nil {
			return "", err
		}
		mu.Lock()
		cache[customer] = entry{tok: tok, renew: now.Add(ttl - ttl/4)}
		mu.Unlock()
		return tok, nil
	}
}

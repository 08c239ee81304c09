package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// Modes of --auth.
const (
	authDev  = "dev"
	authJWT  = "jwt"
	authNone = "none"
)

// Defaults of checkout's per-client rate limit (--rate-limit,
// --rate-burst): generous for one customer, and enough for the guests of a
// replay, who share the replay's address.
const (
	defaultRateLimit = 100.0
	// maxRateLimit bounds --rate-limit: beyond it a limit means nothing
	// (0 is none), and Inf would reach checkout's Config unchecked.
	maxRateLimit   = 1e6
	defaultDataDir = ".ordercast"
)

// authFlags are checkout's authentication and rate-limit flags, shared by
// up and run.
type authFlags struct {
	fs         *pflag.FlagSet
	mode       string
	jwksURL    string
	keyFile    string
	issuer     string
	audience   string
	types      string
	algorithms string
	skew       time.Duration
	claim      string
	required   bool
	devKey     string
	rateLimit  float64
	rateBurst  int
	// devKeyLoaded is the key apply loaded with --auth dev, for up's
	// replay.
	devKeyLoaded *authn.DevKey
}

func (a *authFlags) register(f *pflag.FlagSet, embedded bool) {
	a.fs = f
	devKeyDefault := "<--data-dir>/auth/" + authn.DevKeyFile
	if !embedded {
		devKeyDefault = authn.DevKeyPath(defaultDataDir) + ", the key of 'ordercast up'"
	}
	f.StringVar(&a.mode, "auth", authDev, "checkout's authentication: dev (tokens signed by the development key, --auth-dev-key, made on first start; 'ordercast token' prints one), jwt (tokens of your identity provider: --auth-jwks-url or --auth-key-file, --auth-issuer, --auth-audience) or none (anyone may order in anyone's name; refused unless --http is a loopback address)")
	f.StringVar(&a.jwksURL, "auth-jwks-url", "", "with --auth jwt: the identity provider's JWK Set URL (jwks_uri), fetched at start and refreshed hourly")
	f.StringVar(&a.keyFile, "auth-key-file", "", "with --auth jwt: a file of verification keys, a JWK Set (JSON) or PEM public keys or certificates (instead of --auth-jwks-url)")
	f.StringVar(&a.issuer, "auth-issuer", "", "with --auth jwt: the tokens' issuer (iss), exactly")
	f.StringVar(&a.audience, "auth-audience", "", "with --auth jwt: the audience (aud) tokens must be for")
	f.StringVar(&a.types, "auth-token-types", "", "with --auth jwt: the token types (the JOSE typ header, comma-separated, such as at+jwt for RFC 9068 access tokens) accepted; empty: any")
	f.StringVar(&a.algorithms, "auth-algorithms", strings.Join(authn.DefaultAlgorithms, ","), "with --auth jwt: the signing algorithms accepted, comma separated, of "+strings.Join(authn.Algorithms, ", ")+" (none and HS* are never accepted)")
	f.DurationVar(&a.skew, "auth-clock-skew", authn.DefaultLeeway, "clock skew allowed on a token's exp, nbf and iat, up to "+authn.MaxLeeway.String())
	f.StringVar(&a.claim, "auth-customer-claim", authn.DefaultCustomerClaim, "with --auth jwt: the claim holding the customer id")
	f.BoolVar(&a.required, "auth-required", false, "every checkout request needs a token: no guest orders, no anonymous GET /orders/{id}")
	f.StringVar(&a.devKey, "auth-dev-key", "", "with --auth dev: the development signing key file (default "+devKeyDefault+")")
	f.Float64Var(&a.rateLimit, "rate-limit", defaultRateLimit, "checkout's requests per second per client (the token's customer, else the client IP); past --rate-burst a request is answered 429 with Retry-After (0: no limit)")
	f.IntVar(&a.rateBurst, "rate-burst", 0, "requests a client may make at once before --rate-limit applies (0: twice --rate-limit)")
}

// check validates the flags without acting on them; httpAddr is --http.
func (a *authFlags) check(httpAddr string) error {
	switch a.mode {
	case authDev, authJWT, authNone:
	default:
		return fmt.Errorf("--auth %q: want dev, jwt or none", a.mode)
	}
	for _, d := range []struct {
		flag, mode string
	}{
		{"auth-jwks-url", authJWT}, {"auth-key-file", authJWT}, {"auth-issuer", authJWT}, {"auth-audience", authJWT}, {"auth-token-types", authJWT},
		{"auth-algorithms", authJWT}, {"auth-customer-claim", authJWT}, {"auth-dev-key", authDev},
	} {
		if a.fs.Changed(d.flag) && a.mode != d.mode {
			return fmt.Errorf("--%s needs --auth %s (it is --auth %s)", d.flag, d.mode, a.mode)
		}
	}
	if a.mode == authNone {
		for _, fl := range []string{"auth-required", "auth-clock-skew"} {
			if a.fs.Changed(fl) {
				return fmt.Errorf("--%s needs --auth dev or jwt: with --auth none there are no tokens", fl)
			}
		}
		if !loopback(httpAddr) {
			return fmt.Errorf("--auth none with --http %s: refused, since anyone who reaches a non-loopback address could order in any customer's name; use --auth jwt (or dev), or listen on 127.0.0.1", httpAddr)
		}
	}
	if a.skew < 0 || a.skew > authn.MaxLeeway {
		return fmt.Errorf("--auth-clock-skew %v: want a duration from 0s to %v, such as 30s", a.skew, authn.MaxLeeway)
	}
	if a.mode == authJWT {
		switch {
		case a.jwksURL == "" && a.keyFile == "":
			return errors.New("--auth jwt needs --auth-jwks-url (the identity provider's JWK Set URL) or --auth-key-file (a JWK Set or PEM public keys)")
		case a.jwksURL != "" && a.keyFile != "":
			return errors.New("--auth-jwks-url and --auth-key-file: give one of them, not both")
		case a.issuer == "":
			return errors.New("--auth jwt needs --auth-issuer: the exact iss of the tokens, such as https://idp.example/")
		case a.audience == "":
			return errors.New("--auth jwt needs --auth-audience: the aud the tokens are for, such as ordercast-checkout")
		case strings.TrimSpace(a.claim) == "":
			return errors.New("--auth-customer-claim \"\": want a claim name, such as sub")
		}
		if err := authn.CheckAlgorithms(splitList(a.algorithms)); err != nil || len(splitList(a.algorithms)) == 0 {
			if err == nil {
				err = errors.New("no algorithm given")
			}
			return fmt.Errorf("--auth-algorithms %q: %w", a.algorithms, err)
		}
	}
	if !(a.rateLimit >= 0 && a.rateLimit <= maxRateLimit) {
		return fmt.Errorf("--rate-limit %v: want requests per second per client from 0 to %g, such as 100 (0: no limit)", a.rateLimit, float64(maxRateLimit))
	}
	if a.rateBurst < 0 {
		return fmt.Errorf("--rate-burst %d: want >= 0 (0: twice --rate-limit)", a.rateBurst)
	}
	if a.fs.Changed("rate-burst") && a.rateLimit == 0 {
		return errors.New("--rate-burst needs a --rate-limit above 0")
	}
	return nil
}

// loopback reports whether a listen address (host:port) is on the loopback
// interface only: a loopback IP, or a name that resolves only to them
// ("localhost"). An empty host (every interface) is not.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// apply builds the verifier of the mode into cfg (after check): the dev
// key is loaded or made (dataDir: up's --data-dir; "" for run, whose
// default is the key of 'ordercast up'), the JWKS fetched (ctx ends its
// refreshing). It returns a line for people saying what the mode protects.
func (a *authFlags) apply(ctx context.Context, cfg *system.Config, dataDir string) (string, error) {
	cfg.Checkout.RateLimit, cfg.Checkout.RateBurst = a.rateLimit, a.rateBurst
	cfg.Checkout.AuthRequired = a.required
	switch a.mode {
	case authNone:
		cfg.Logger.Warn("checkout runs with --auth none: anyone who can reach it may order in any customer's name and read any order; use --auth dev or jwt", "http", cfg.HTTP.Addr)
		return "auth none: no tokens, anyone may order in anyone's name (loopback only)", nil
	case authDev:
		path := a.devKeyPath(dataDir)
		k, err := authn.LoadOrCreateDevKey(path)
		if err != nil {
			return "", fmt.Errorf("--auth dev (--auth-dev-key %s): %w", path, err)
		}
		if cfg.Checkout.Auth, err = k.Verifier(a.skew); err != nil {
			return "", err
		}
		a.devKeyLoaded = k
		hint := ""
		if dataDir != "" && filepath.Clean(dataDir) != defaultDataDir {
			hint = " --data-dir " + dataDir
		}
		return fmt.Sprintf("auth dev: development tokens signed by %s ('ordercast token --customer 17850%s' prints one)", path, hint), nil
	}
	var keys, err = a.keys(ctx)
	if err != nil {
		return "", err
	}
	cfg.Checkout.Auth, err = authn.New(authn.Config{Keys: keys, Issuer: a.issuer, Audience: a.audience,
		Algorithms: splitList(a.algorithms), Leeway: a.skew, CustomerClaim: strings.TrimSpace(a.claim), Types: splitList(a.types)})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("auth jwt: tokens of %s for %s, %s", a.issuer, a.audience, a.algorithms), nil
}

func (a *authFlags) keys(ctx context.Context) (jwt.Keyfunc, error) {
	if a.jwksURL != "" {
		k, err := authn.JWKS(ctx, a.jwksURL, 0)
		if err != nil {
			return nil, fmt.Errorf("--auth-jwks-url %s: %w", a.jwksURL, err)
		}
		return k, nil
	}
	k, err := authn.KeyFile(a.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--auth-key-file %s: %w", a.keyFile, err)
	}
	return k, nil
}

// devKeyPath is --auth-dev-key, else the key of dataDir (up's --data-dir),
// else of the default data directory.
func (a *authFlags) devKeyPath(dataDir string) string {
	switch {
	case a.devKey != "":
		return a.devKey
	case dataDir != "":
		return authn.DevKeyPath(dataDir)
	}
	return authn.DevKeyPath(defaultDataDir)
}

// devTokens are the --auth/--data-dir flags of a client of checkout
// (replay, load): with dev, each customer's order carries a development
// token signed by the key of 'ordercast up'; auto (the default) is dev when
// that key exists and none otherwise.
type devTokens struct {
	mode    string
	dataDir string
	devKey  string
	fs      *pflag.FlagSet
}

const authAuto = "auto"

func (d *devTokens) register(f *pflag.FlagSet) {
	d.fs = f
	f.StringVar(&d.mode, "auth", authAuto, "tokens to send: dev (a development token for each order's customer, signed by the key of 'ordercast up', see --data-dir), none (no Authorization header: for a checkout with --auth none) or auto (dev if that key exists, else none, saying so)")
	f.StringVar(&d.dataDir, "data-dir", defaultDataDir, "with --auth dev or auto: the --data-dir of 'ordercast up', whose auth/"+authn.DevKeyFile+" signs the tokens")
	f.StringVar(&d.devKey, "auth-dev-key", "", "with --auth dev or auto: the development key file (default <--data-dir>/auth/"+authn.DevKeyFile+")")
}

// tokens returns the function giving a customer's token, or nil when none
// are sent (--auth none, or auto without a key: then it says so on
// stderr).
func (d *devTokens) tokens(stderr io.Writer) (func(string) (string, error), error) {
	switch d.mode {
	case authNone:
		if d.fs != nil && (d.fs.Changed("data-dir") || d.fs.Changed("auth-dev-key")) {
			return nil, errors.New("--data-dir and --auth-dev-key need --auth dev or auto: with --auth none no token is sent")
		}
		return nil, nil
	case authDev, authAuto:
	default:
		return nil, fmt.Errorf("--auth %q: want dev, none or auto", d.mode)
	}
	k, err := d.key()
	if err != nil && d.mode == authAuto && errors.Is(err, authn.ErrNoDevKey) {
		fmt.Fprintf(stderr, "no development key at %s: sending no tokens, so a checkout with --auth dev or jwt refuses the customers' orders (401); guests' orders need none (--auth none to say so, --data-dir for up's key)\n", d.keyPath())
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return k.Tokens(authn.DevTokenTTL), nil
}

func (d *devTokens) keyPath() string {
	if d.devKey != "" {
		return d.devKey
	}
	return authn.DevKeyPath(d.dataDir)
}

// key loads the development key of 'ordercast up'.
func (d *devTokens) key() (*authn.DevKey, error) {
	path := d.keyPath()
	k, err := authn.LoadDevKey(path)
	if errors.Is(err, authn.ErrNoDevKey) {
		return nil, fmt.Errorf("--auth dev: no development key at %s: is it the --data-dir of 'ordercast up' (which makes it at its first start)? For a checkout with --auth none, pass --auth none: %w", path, authn.ErrNoDevKey)
	}
	if err != nil {
		return nil, fmt.Errorf("--auth dev: %w", err)
	}
	return k, nil
}

func newToken() *cobra.Command {
	var (
		customer string
		dataDir  string
		devKey   string
		ttl      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token --customer ID",
		Short: "Print a development bearer token for a customer (checkout's --auth dev)",
		Long: `Prints a JWT for the customer, signed by the development key of 'ordercast up' (made in its
--data-dir at its first start with --auth dev, the default), for
Authorization: Bearer <token>. Whoever can read that key can order as anyone: it is for
development and tests, not production (use --auth jwt with your identity provider there).`,
		Example: `  curl -H "Authorization: Bearer $(ordercast token --customer 17850)" -H 'Content-Type: application/json' \
    -d '{"lines":[{"stockCode":"85123A","quantity":6}]}' http://127.0.0.1:8080/orders`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if customer == "" {
				return errors.New("--customer is required: the customer id the token is for, such as 17850")
			}
			if len(customer) > 64 || strings.Trim(customer, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
				return fmt.Errorf("--customer %q: want a customer id, 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-', such as 17850", customer)
			}
			if ttl < time.Second || ttl > 24*time.Hour {
				return fmt.Errorf("--ttl %v: want a duration from 1s to 24h, such as 1h", ttl)
			}
			k, err := (&devTokens{mode: authDev, dataDir: dataDir, devKey: devKey}).key()
			if err != nil {
				return err
			}
			tok, err := k.Token(customer, ttl, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&customer, "customer", "", "the customer id the token is for (its sub), such as 17850")
	f.StringVar(&dataDir, "data-dir", defaultDataDir, "the --data-dir of 'ordercast up', whose auth/"+authn.DevKeyFile+" signs the token")
	f.StringVar(&devKey, "auth-dev-key", "", "the development key file (default <--data-dir>/auth/"+authn.DevKeyFile+")")
	f.DurationVar(&ttl, "ttl", authn.DevTokenTTL, "how long the token is valid")
	return cmd
}

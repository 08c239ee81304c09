package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/service/checkout/authn"
)

// Every auth flag error names the flag and what it expects, before anything
// starts.
func TestAuthFlagErrors(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.pem")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth", "oauth"}, `--auth "oauth": want dev, jwt or none`},
		{[]string{"--auth", "none", "--http", "0.0.0.0:8080"}, "--auth none with --http 0.0.0.0:8080: refused"},
		{[]string{"--auth", "none", "--http", ":8080"}, "--auth none with --http :8080: refused"},
		{[]string{"--auth", "none", "--auth-required"}, "--auth-required needs --auth dev or jwt"},
		{[]string{"--auth", "jwt", "--auth-issuer", "i", "--auth-audience", "a"}, "--auth jwt needs --auth-jwks-url"},
		{[]string{"--auth", "jwt", "--auth-key-file", keyFile, "--auth-jwks-url", "https://idp/jwks", "--auth-issuer", "i", "--auth-audience", "a"}, "give one of them, not both"},
		{[]string{"--auth", "jwt", "--auth-key-file", keyFile, "--auth-audience", "a"}, "--auth jwt needs --auth-issuer"},
		{[]string{"--auth", "jwt", "--auth-key-file", keyFile, "--auth-issuer", "i"}, "--auth jwt needs --auth-audience"},
		{[]string{"--auth", "jwt", "--auth-key-file", keyFile, "--auth-issuer", "i", "--auth-audience", "a", "--auth-algorithms", "RS256,HS256"}, `--auth-algorithms "RS256,HS256": "HS256" is refused: HMAC`},
		{[]string{"--auth", "jwt", "--auth-key-file", keyFile, "--auth-issuer", "i", "--auth-audience", "a", "--auth-algorithms", "none"}, `--auth-algorithms "none": "none" is refused`},
		{[]string{"--auth", "jwt", "--auth-key-file", keyFile, "--auth-issuer", "i", "--auth-audience", "a"}, "--auth-key-file " + keyFile + ": "},
		{[]string{"--auth-issuer", "i"}, "--auth-issuer needs --auth jwt (it is --auth dev)"},
		{[]string{"--auth", "jwt", "--auth-dev-key", "k"}, "--auth-dev-key needs --auth dev (it is --auth jwt)"},
		{[]string{"--auth-clock-skew", "10m"}, "--auth-clock-skew 10m0s: want a duration from 0s to 5m0s"},
		{[]string{"--auth-clock-skew", "soon"}, `--auth-clock-skew "soon": want a duration`},
		{[]string{"--rate-limit", "-1"}, "--rate-limit -1: want requests per second per client from 0 to 1e+06"},
		{[]string{"--rate-limit", "Inf"}, "--rate-limit +Inf: want requests per second per client from 0 to 1e+06"},
		{[]string{"--rate-limit", "1e7"}, "--rate-limit 1e+07: want requests per second per client from 0 to 1e+06"},
		{[]string{"--rate-limit", "0", "--rate-burst", "5"}, "--rate-burst needs a --rate-limit above 0"},
		{[]string{"--auth", "jwt", "--replay", oneDay}, "--replay with --auth jwt"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			root := newRoot()
			root.SetOut(&bytes.Buffer{})
			root.SetErr(&bytes.Buffer{})
			root.SetArgs(append([]string{"up", "--data-dir", dir, "--broker-addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0"}, tc.args...))
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("the data directory has %d entries after a flag error, want nothing started", len(ents))
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token"}, "--customer is required"},
		{[]string{"token", "--customer", "17 850"}, `--customer "17 850": want a customer id`},
		{[]string{"token", "--customer", "17850", "--ttl", "0s"}, "--ttl 0s: want a duration from 1s to 24h"},
		{[]string{"token", "--customer", "17850", "--ttl", "500ms"}, "--ttl 500ms: want a duration from 1s to 24h"},
		{[]string{"token", "--customer", "17850", "--data-dir", t.TempDir()}, "--auth dev: no development key at"},
		{[]string{"replay", oneDay, "--auth", "basic"}, `--auth "basic": want dev, none or auto`},
		{[]string{"replay", oneDay, "--auth", "dev", "--data-dir", t.TempDir()}, "--auth dev: no development key at"},
		{[]string{"replay", oneDay, "--auth", "none", "--data-dir", t.TempDir()}, "--data-dir and --auth-dev-key need --auth dev or auto"},
		{[]string{"load", "--auth", "dev", "--data-dir", t.TempDir()}, "--auth dev: no development key at"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			root := newRoot()
			root.SetOut(&bytes.Buffer{})
			root.SetErr(&bytes.Buffer{})
			root.SetArgs(tc.args)
			if err := root.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// --auth dev end to end: `up` makes the key (0600) in its data directory,
// `ordercast token` prints a token for it that checkout accepts for that
// customer only, and `ordercast replay` (and up's own replay) send each
// customer's order with such a token, so the replay's orders go through
// the real verification path.
func TestDevAuthEndToEnd(t *testing.T) {
	freshCluster(t)
	bin := buildBinary(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	p := launchUp(t, bin, upArgs(dataDir)...)
	defer func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t)
	}()
	// The line after the one launchUp waits for.
	said := "checkout auth dev: development tokens signed by " + authn.DevKeyPath(dataDir)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.log(), said); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("up did not say it runs --auth dev with the key of its data directory:\n%s", p.log())
		}
	}
	fi, err := os.Stat(authn.DevKeyPath(dataDir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev key %s: %v, mode %v; want a file of mode 0600", authn.DevKeyPath(dataDir), err, fi)
	}

	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetArgs([]string{"token", "--customer", "17850", "--data-dir", dataDir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out.String())
	post := func(body, token string) (int, order.ErrorResponse) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.base+"/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e order.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}
	if st, e := post(`{"customerId":"17850","lines":[{"stockCode":"85123A","quantity":1}]}`, tok); st != http.StatusAccepted {
		t.Fatalf("order of 17850 with its dev token: %d %+v, want 202", st, e)
	}
	if st, e := post(`{"customerId":"13047","lines":[{"stockCode":"85123A","quantity":1}]}`, tok); st != http.StatusForbidden || e.Code != "customer_mismatch" {
		t.Fatalf("order of 13047 with 17850's token: %d %+v, want 403 customer_mismatch", st, e)
	}
	if st, e := post(`{"customerId":"13047","lines":[{"stockCode":"85123A","quantity":1}]}`, ""); st != http.StatusUnauthorized {
		t.Fatalf("order of 13047 without a token: %d %+v, want 401", st, e)
	}

	// The standalone replay signs with the same key (--data-dir).
	summary := filepath.Join(t.TempDir(), "summary.json")
	var stderr bytes.Buffer
	root = newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&stderr)
	root.SetArgs([]string{"replay", oneDay, "--url", "http://" + p.base, "--data-dir", dataDir, "--summary", summary})
	if err := root.Execute(); err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	var sum struct {
		OrdersAccepted int            `json:"ordersAccepted"`
		Rejected       map[string]int `json:"rejected"`
		Failed         int            `json:"failed"`
	}
	b, err := os.ReadFile(summary)
	if err != nil || json.Unmarshal(b, &sum) != nil {
		t.Fatalf("summary %s: %v %s", summary, err, b)
	}
	if sum.Failed != 0 || sum.Rejected["unauthorized"] != 0 || sum.Rejected["customer_mismatch"] != 0 || sum.OrdersAccepted < 100 {
		t.Fatalf("replay summary %s: want no failure, no auth rejection and the day's orders accepted", b)
	}

	// The same replay with --auth none sends no tokens: every customer
	// order is refused 401 (guests still accepted), so the tokens above
	// were what let them in.
	stderr.Reset()
	root = newRoot()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&stderr)
	root.SetArgs([]string{"replay", oneDay, "--url", "http://" + p.base, "--auth", "none", "--summary", summary})
	_ = root.Execute()
	b, _ = os.ReadFile(summary)
	sum.Rejected = nil
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	// (Authorization is checked before the Idempotency-Key is looked up:
	// an accepted key's stored 202 is not replayed to a stranger.)
	if sum.Rejected["unauthorized"] == 0 {
		t.Fatalf("replay without tokens: summary %s, want its customer orders refused unauthorized", b)
	}
}

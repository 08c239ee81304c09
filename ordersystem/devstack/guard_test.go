package devstack

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

// TestRemoteAddrRefused: a broker or registry address that is not a
// loopback one (every interface, a LAN address) is refused before anything
// listens or is created, naming the flag and the way out; with AllowRemote
// it starts and warns.
func TestRemoteAddrRefused(t *testing.T) {
	for _, c := range []Config{
		{BrokerAddr: ":0", RegistryAddr: "127.0.0.1:0"},
		{BrokerAddr: "0.0.0.0:0", RegistryAddr: "127.0.0.1:0"},
		{BrokerAddr: "127.0.0.1:0", RegistryAddr: "[::]:0"},
		{BrokerAddr: "192.0.2.1:9092", RegistryAddr: "127.0.0.1:0"},
	} {
		c.DataDir = filepath.Join(t.TempDir(), "d")
		st, err := Start(c)
		if err == nil {
			st.Close()
			t.Errorf("%s / %s: started on a non-loopback address without AllowRemote", c.BrokerAddr, c.RegistryAddr)
			continue
		}
		if !errors.Is(err, ErrRemoteAddr) || !strings.Contains(err.Error(), "--allow-remote-embedded") || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("%s / %s: %v; want ErrRemoteAddr naming --allow-remote-embedded", c.BrokerAddr, c.RegistryAddr, err)
		}
		if _, serr := os.Stat(c.DataDir); serr == nil {
			t.Errorf("%s / %s: the data directory was created before the address was refused", c.BrokerAddr, c.RegistryAddr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "127.3.1.1:0", "[::1]:0", "localhost:0"} {
		if !Loopback(addr) {
			t.Errorf("Loopback(%q) = false", addr)
		}
	}

	var logs bytes.Buffer
	st, err := Start(Config{DataDir: t.TempDir(), BrokerAddr: "0.0.0.0:0", RegistryAddr: "127.0.0.1:0", AllowRemote: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "--broker-addr") {
		t.Errorf("AllowRemote on 0.0.0.0: no warning naming --broker-addr; logs:\n%s", logs.String())
	}
}

// TestRegistryRefusesConfigChanges: the embedded registry registers and
// serves schemas, but refuses to set the compatibility level (NONE would let
// a breaking schema in) and to delete subjects; the level stays BACKWARD.
func TestRegistryRefusesConfigChanges(t *testing.T) {
	st, err := Start(Config{DataDir: t.TempDir(), BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := sr.NewClient(sr.URLs(st.RegistryURL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchema(ctx, "t-value", sr.Schema{Schema: `{"type":"record","name":"T","fields":[{"name":"a","type":"string"}]}`}); err != nil {
		t.Fatalf("register a schema: %v", err)
	}
	for _, c := range []struct {
		method, path, body string
	}{
		{http.MethodPut, "/config", `{"compatibility":"NONE"}`},
		{http.MethodPut, "/config/t-value", `{"compatibility":"NONE"}`},
		{http.MethodDelete, "/subjects/t-value", ""},
		{http.MethodPut, "/mode", `{"mode":"IMPORT"}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, c.method, st.RegistryURL+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s: %d, want 403", c.method, c.path, resp.StatusCode)
		}
	}
	res := cl.Compatibility(ctx)
	if len(res) != 1 || res[0].Err != nil || res[0].Level != sr.CompatBackward {
		t.Errorf("global compatibility after the refused PUT: %+v, want BACKWARD", res)
	}
	if subs, err := cl.Subjects(ctx); err != nil || len(subs) != 1 {
		t.Errorf("subjects after the refused DELETE: %v, %v", subs, err)
	}
}

// TestDataDirPermissions: a new data directory is made readable by its
// owner only; an existing one is refused (its mode kept) when group or
// others may write it, and set to 0700 with a warning when they may only
// read it.
func TestDataDirPermissions(t *testing.T) {
	fresh := filepath.Join(t.TempDir(), "fresh")
	st, err := Start(Config{DataDir: fresh, BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("new data directory: %v %v, want mode 0700", fi.Mode().Perm(), err)
	}
	for _, name := range []string{"registry.json", "LOCK"} {
		if fi, err := os.Stat(filepath.Join(fresh, name)); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v %v, want readable by its owner only", name, fi.Mode().Perm(), err)
		}
	}

	writable := t.TempDir()
	if err := os.Chmod(writable, 0o777); err != nil {
		t.Fatal(err)
	}
	if st, err := Start(Config{DataDir: writable, BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0"}); err == nil {
		st.Close()
		t.Error("a world-writable data directory was accepted")
	} else if !strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("world-writable data directory: %v; want the chmod that fixes it", err)
	}
	if fi, _ := os.Stat(writable); fi.Mode().Perm() != 0o777 {
		t.Errorf("the refused directory's mode changed to %v", fi.Mode().Perm())
	}

	readable := t.TempDir()
	if err := os.Chmod(readable, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	st, err = Start(Config{DataDir: readable, BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "readable by group or others") {
		t.Errorf("group/world-readable data directory: no warning; logs:\n%s", logs.String())
	}
	if fi, _ := os.Stat(readable); fi.Mode().Perm() != 0o700 {
		t.Errorf("a 0755 data directory left at %v; want 0700", fi.Mode().Perm())
	}
}

// TestConnectionCap: with MaxConns 1, a second connection to the broker is
// not served while the first is open, and is once it closes; the same for
// the registry.
func TestConnectionCap(t *testing.T) {
	st, err := Start(Config{DataDir: t.TempDir(), BrokerAddr: "127.0.0.1:0", RegistryAddr: "127.0.0.1:0", MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []struct {
		what string
		addr string
		ask  func(ctx context.Context) error
	}{
		{"broker", st.Brokers[0], func(ctx context.Context) error {
			cl, err := kgo.NewClient(kgo.SeedBrokers(st.Brokers...))
			if err != nil {
				return err
			}
			defer cl.Close()
			_, err = kadm.NewClient(cl).BrokerMetadata(ctx)
			return err
		}},
		{"registry", strings.TrimPrefix(st.RegistryURL, "http://"), func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.RegistryURL+"/subjects", nil)
			resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}},
	} {
		hog, err := net.Dial("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err = c.ask(ctx)
		cancel()
		if err == nil {
			t.Errorf("%s: answered a second connection while MaxConns 1 was taken", c.what)
		}
		hog.Close()
		ctx, cancel = context.WithTimeout(context.Background(), 15*time.Second)
		if err := c.ask(ctx); err != nil {
			t.Errorf("%s: not answered once the first connection closed: %v", c.what, err)
		}
		cancel()
	}
}

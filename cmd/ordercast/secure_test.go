package main

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// The secured cluster of `make test-kafka-secure` (scripts/kafka.sh start
// --secure): its SASL_SSL bootstrap servers, the CA that signed the broker's
// certificate and the password of its super user admin.
const (
	envSecureBrokers  = "ORDERCAST_TEST_SECURE_BROKERS"
	envSecureCA       = "ORDERCAST_TEST_SECURE_CA"
	envSecureAdminPwd = "ORDERCAST_TEST_SECURE_ADMIN_PASSWORD"
)

// secureEnv is the secured cluster's settings and the registry in front of
// which the services run in TestSecureCluster.
type secureEnv struct {
	brokers, ca, adminPwd string
	regURL, regCA         string
	dsn                   string
}

// regUser and regPass are the basic-auth credentials of the test registry.
const regUser, regPass = "ordercast", "registry-secret"

// tlsRegistry serves srfake behind an httptest TLS server (its own CA) that
// requires HTTP basic auth (RFC 7617) with regUser and regPass. It returns
// the https URL and the path of a PEM file of the server's certificate.
func tlsRegistry(t *testing.T) (string, string) {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	target, err := url.Parse(reg.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != regUser || p != regPass {
			w.Header().Set("WWW-Authenticate", `Basic realm="schema registry"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error_code":401,"message":"Unauthorized"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	caPath := filepath.Join(t.TempDir(), "registry-ca.pem")
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, caPath
}

// startAs starts svc as the SCRAM user user with password pass, through the
// flags `ordercast run` parses (--kafka-tls, --sasl-*, --registry-*): the
// flags later in extra override the defaults.
func (e *secureEnv) startAs(t *testing.T, svc, user, pass string, extra ...string) (*system.System, error) {
	t.Helper()
	var c common
	cmd := &cobra.Command{Use: "run"}
	c.register(cmd, false)
	args := []string{"--brokers", e.brokers, "--kafka-tls", "--kafka-tls-ca", e.ca,
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", user, "--sasl-password", pass,
		"--registry", e.regURL, "--registry-user", regUser, "--registry-password", regPass, "--registry-tls-ca", e.regCA,
		"--db", e.dsn, "--http", "127.0.0.1:0", "--admin-http", "127.0.0.1:0", "--partitions", "2", "--member-id", "secure1", "--session-timeout", "6s"}
	if err := cmd.Flags().Parse(append(args, extra...)); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Services = []string{svc}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return system.Start(ctx, cfg)
}

// admin is a client of the secured cluster as its super user.
func (e *secureEnv) admin(t *testing.T) *kadm.Client {
	t.Helper()
	opts, err := (&security{tls: true, tlsCA: e.ca, saslMechanism: "SCRAM-SHA-512", saslUser: "admin", saslPassword: e.adminPwd}).kafkaOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(strings.Split(e.brokers, ",")...))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func (e *secureEnv) adminArgs(args ...string) []string {
	return append(args, "--brokers", e.brokers, "--kafka-tls", "--kafka-tls-ca", e.ca,
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "admin", "--sasl-password", e.adminPwd)
}

func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: started; want an error naming %q", what, parts)
	}
	t.Logf("%s: %v", what, err)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q lacks %q", what, err, p)
		}
	}
}

// TestSecureCluster runs the order system on a Kafka with SASL_SSL
// (SCRAM-SHA-512), the StandardAuthorizer and allow.everyone.if.no.acl.found
// off, each service as its own principal with only the ACLs `ordercast
// acls` prints (applied by `ordercast acls --apply --create-users`), and
// the schema registry behind TLS and basic auth. A wrong password, an
// untrusted certificate (Kafka's and the registry's), wrong registry
// credentials and a missing ACL each stop the start with an error naming
// the cause; the order placed while payments lacked its ACL is neither lost
// nor committed past: it is paid and shipped once the ACL is back.
func TestSecureCluster(t *testing.T) {
	e := &secureEnv{brokers: os.Getenv(envSecureBrokers), ca: os.Getenv(envSecureCA), adminPwd: os.Getenv(envSecureAdminPwd)}
	if e.brokers == "" {
		t.Skipf("%s is not set: run `make test-kafka-secure` (a SASL_SSL Kafka of scripts/kafka.sh start --secure)", envSecureBrokers)
	}
	if e.ca == "" || e.adminPwd == "" {
		t.Fatalf("%s needs %s and %s", envSecureBrokers, envSecureCA, envSecureAdminPwd)
	}
	e.regURL, e.regCA = tlsRegistry(t)
	e.dsn = "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")
	adm := e.admin(t)
	ctx := context.Background()

	// A cluster of earlier runs: no system topic, group or ACL left.
	if topics, err := adm.ListTopics(ctx); err == nil {
		if _, err := adm.DeleteTopics(ctx, topics.Names()...); err != nil {
			t.Logf("delete topics: %v", err)
		}
	}
	_, _ = adm.DeleteGroups(ctx, order.Groups...)
	var principals []string
	for _, s := range system.AllServices {
		principals = append(principals, "User:ordercast-"+s)
	}
	if _, err := adm.DeleteACLs(ctx, kadm.NewACLs().Allow(principals...).AllowHosts().AnyResource().Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny)); err != nil {
		t.Logf("delete ACLs: %v", err)
	}

	users := filepath.Join(t.TempDir(), "users.txt")
	pwd := map[string]string{}
	var lines []string
	for _, s := range system.AllServices {
		pwd[s] = "pw-" + s + "-" + fmt.Sprint(time.Now().UnixNano()%1000)
		lines = append(lines, s+"="+pwd[s])
	}
	if err := os.WriteFile(users, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := ordercast(t, e.adminArgs("acls", "--apply", "--create-users", users)...)
	if err != nil || strings.Contains(out, "failed") {
		t.Fatalf("acls --apply: %v\n%s", err, out)
	}
	if out, err := ordercast(t, e.adminArgs("topics", "create", "--system", "--partitions", "2")...); err != nil {
		t.Fatalf("topics create: %v\n%s", err, out)
	}
	wait := func(what string, cond func() bool) { testkafka.WaitFor(t, 60*time.Second, what, cond) }

	t.Run("wrong-password", func(t *testing.T) {
		_, err := e.startAs(t, system.ServicePayments, "ordercast-payments", "not-the-password")
		wantErr(t, "wrong SASL password", err, "User:ordercast-payments", "SASL", "invalid credentials")
	})
	t.Run("untrusted-broker-certificate", func(t *testing.T) {
		_, err := e.startAs(t, system.ServicePayments, "ordercast-payments", pwd["payments"], "--kafka-tls-ca", "")
		wantErr(t, "broker certificate of an unknown CA", err, "TLS certificate is not trusted", "--kafka-tls-ca", "x509")
	})
	t.Run("registry-wrong-password", func(t *testing.T) {
		_, err := e.startAs(t, system.ServiceCheckout, "ordercast-checkout", pwd["checkout"], "--registry-password", "wrong")
		wantErr(t, "wrong registry password", err, "schema registry", "HTTP 401", "--registry-password")
	})
	t.Run("registry-untrusted-certificate", func(t *testing.T) {
		_, err := e.startAs(t, system.ServiceCheckout, "ordercast-checkout", pwd["checkout"], "--registry-tls-ca", "")
		wantErr(t, "registry certificate of an unknown CA", err, "schema registry's TLS certificate is not trusted", "--registry-tls-ca")
	})

	checkout, err := e.startAs(t, system.ServiceCheckout, "ordercast-checkout", pwd["checkout"])
	if err != nil {
		t.Fatalf("checkout as ordercast-checkout: %v", err)
	}
	t.Cleanup(func() { _ = checkout.Stop(context.Background()) })
	base := checkout.HTTPAddr()
	guest := func(i int) string {
		return fmt.Sprintf(`{"customerId":null,"lines":[{"stockCode":"85123A","quantity":%d}]}`, i+1)
	}
	var ids []string
	ids = append(ids, placeOrder(t, base, "secure-0", guest(0)).OrderID)

	t.Run("missing-acl", func(t *testing.T) {
		b := kadm.NewACLs().Allow("User:ordercast-payments").AllowHosts("*").Topics(order.TopicPaymentProcessed).
			Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)
		if res, err := adm.DeleteACLs(ctx, b); err != nil || len(res) != 1 || len(res[0].Deleted) != 1 {
			t.Fatalf("delete payments' WRITE on paymentProcessed: %+v %v", res, err)
		}
		sys, err := e.startAs(t, system.ServicePayments, "ordercast-payments", pwd["payments"])
		if err == nil {
			_ = sys.Stop(context.Background())
		}
		wantErr(t, "payments without WRITE on paymentProcessed", err,
			"User:ordercast-payments", "WRITE on Topic paymentProcessed", "ordercast acls --apply")
		offs, err := adm.FetchOffsets(ctx, order.GroupPayments)
		if err != nil && !strings.Contains(err.Error(), "GROUP_ID_NOT_FOUND") {
			t.Fatalf("payments' committed offsets: %v", err)
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				t.Errorf("payments committed %s/%d at %d while refused", o.Topic, o.Partition, o.At)
			}
		})
		if out, err := ordercast(t, e.adminArgs("acls", "--apply", "--services", "payments")...); err != nil {
			t.Fatalf("acls --apply --services payments: %v\n%s", err, out)
		}
	})

	for _, svc := range []string{system.ServiceOrders, system.ServicePayments, system.ServiceNotifications, system.ServiceFulfillment} {
		var sys *system.System
		wait(svc+" started as its principal", func() bool {
			s, err := e.startAs(t, svc, "ordercast-"+svc, pwd[svc])
			if err != nil {
				t.Logf("%s: %v", svc, err)
				return false
			}
			sys = s
			return true
		})
		t.Cleanup(func() { _ = sys.Stop(context.Background()) })
		go func() {
			if err := sys.Wait(context.Background()); err != nil {
				t.Errorf("%s stopped: %v", svc, err)
			}
		}()
	}
	for i := 1; i < 6; i++ {
		ids = append(ids, placeOrder(t, base, fmt.Sprintf("secure-%d", i), guest(i)).OrderID)
	}
	testkafka.WaitFor(t, 120*time.Second, "every order shipped and notified", func() bool {
		for _, id := range ids {
			v, ok := orderView(t, base, id)
			if !ok || v.Status != "shipment_requested" || !v.Notified {
				return false
			}
		}
		return true
	})
}

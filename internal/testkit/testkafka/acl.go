package testkafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The secured real cluster of `make test-kafka-secure` (scripts/kafka.sh
// start --secure: SASL_SSL with SCRAM-SHA-512, the StandardAuthorizer,
// allow.everyone.if.no.acl.found=false): its bootstrap servers, the PEM CA
// that signed its certificates and the password of its super user admin.
// Unset: Secure starts the embedded broker with SCRAM and ACLs instead.
const (
	EnvSecureBrokers       = "ORDERCAST_TEST_SECURE_BROKERS"
	EnvSecureCA            = "ORDERCAST_TEST_SECURE_CA"
	EnvSecureAdminPassword = "ORDERCAST_TEST_SECURE_ADMIN_PASSWORD"
)

// SecureAdmin is the super user of Secure's cluster: it bypasses every ACL
// (like a principal in Kafka's super.users). SecureAdminPassword is its
// password on the embedded broker (EnvSecureAdminPassword's on the real
// one).
const (
	SecureAdmin         = "admin"
	SecureAdminPassword = "admin-secret"
)

// SecureReal reports whether Secure uses the real secured cluster
// (EnvSecureBrokers set).
func SecureReal() bool { return os.Getenv(EnvSecureBrokers) != "" }

// Secure returns the addresses of a cluster that authenticates every
// client with SASL SCRAM-SHA-512 and authorizes every request with its
// ACLs, no ACL meaning no access (Kafka's StandardAuthorizer with
// allow.everyone.if.no.acl.found=false), holding exactly the given topics
// (name -> partitions) and the SCRAM users of users (name -> password),
// with no ACL but the super user's. Log in with Login and AdminOpts.
//
// With EnvSecureBrokers set that is the real secured cluster, over TLS:
// every topic, group, ACL and SCRAM user but the super user's left there
// is deleted first, then the users and topics are created (so, like
// Cluster's real cluster, it is shared: run one package at a time, -p 1).
// Otherwise an in-process kfake broker (whatever EnvBrokers says), closed
// when the test ends. It fails the test on any error.
func Secure(t testing.TB, topics map[string]int32, users map[string]string) []string {
	t.Helper()
	if !SecureReal() {
		opts := []kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(),
			kfake.Superuser("SCRAM-SHA-512", SecureAdmin, SecureAdminPassword)}
		for u, p := range users {
			opts = append(opts, kfake.User("SCRAM-SHA-512", u, p))
		}
		_, addrs := Fake(t, topics, opts...)
		return addrs
	}
	addrs := strings.Split(os.Getenv(EnvSecureBrokers), ",")
	cl, err := kgo.NewClient(AdminOpts(addrs)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
	defer cancel()
	if err := resetSecure(ctx, t, cl, adm, topics, users); err != nil {
		t.Fatalf("testkafka: secured cluster %s (%s): %v", os.Getenv(EnvSecureBrokers), EnvSecureBrokers, err)
	}
	return addrs
}

// resetSecure empties the real secured cluster and creates users and
// topics.
func resetSecure(ctx context.Context, t testing.TB, cl *kgo.Client, adm *kadm.Client, topics map[string]int32, users map[string]string) error {
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("is it running? (scripts/kafka.sh status, with its ORDERCAST_KAFKA_STATE): %w", err)
	}
	if err := checkSessionTimeout(ctx, adm, md); err != nil {
		return err
	}
	if _, err := adm.DeleteACLs(ctx, kadm.NewACLs().AnyResource().Allow().AllowHosts().Deny().DenyHosts().
		Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny)); err != nil {
		return fmt.Errorf("delete ACLs: %w", err)
	}
	described, err := adm.DescribeUserSCRAMs(ctx)
	if err != nil {
		return fmt.Errorf("describe SCRAM users: %w", err)
	}
	var del []kadm.DeleteSCRAM
	for u, d := range described {
		if u == SecureAdmin {
			continue
		}
		for _, ci := range d.CredInfos {
			del = append(del, kadm.DeleteSCRAM{User: u, Mechanism: ci.Mechanism})
		}
	}
	var up []kadm.UpsertSCRAM
	for u, p := range users {
		up = append(up, kadm.UpsertSCRAM{User: u, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: p})
	}
	if len(del) > 0 {
		if res, err := adm.AlterUserSCRAMs(ctx, del, nil); err != nil || !res.Ok() {
			return fmt.Errorf("delete SCRAM users: %v %+v", err, res)
		}
	}
	if len(up) > 0 {
		if res, err := adm.AlterUserSCRAMs(ctx, nil, up); err != nil || !res.Ok() {
			return fmt.Errorf("create SCRAM users: %v %+v", err, res)
		}
	}
	if err := deleteGroups(ctx, t, adm); err != nil {
		return err
	}
	return resetTopics(ctx, cl, adm, md, topics)
}

// Login is the client options that log in to Secure's cluster as user
// with password pass (SCRAM-SHA-512; over TLS, trusting EnvSecureCA, on
// the real one).
func Login(user, pass string) []kgo.Opt {
	opts := []kgo.Opt{kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())}
	if SecureReal() {
		pool := x509.NewCertPool()
		if pem, err := os.ReadFile(os.Getenv(EnvSecureCA)); err == nil {
			pool.AppendCertsFromPEM(pem)
		}
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	return opts
}

// AdminPassword is the password of Secure's super user SecureAdmin.
func AdminPassword() string {
	if SecureReal() {
		return os.Getenv(EnvSecureAdminPassword)
	}
	return SecureAdminPassword
}

// AdminOpts are the client options of Secure's super user on addrs.
func AdminOpts(addrs []string) []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, Login(SecureAdmin, AdminPassword())...)
}

// ACLs is the ALLOW ACL set of ops on one resource (rt, name, a LITERAL
// pattern) for principal ("User:<name>") from any host, as a kadm builder.
func ACLs(principal string, rt kmsg.ACLResourceType, name string, ops ...kmsg.ACLOperation) *kadm.ACLBuilder {
	b := kadm.NewACLs().Allow(principal).AllowHosts("*").Operations(ops...).ResourcePatternType(kadm.ACLPatternLiteral)
	switch rt {
	case kmsg.ACLResourceTypeTopic:
		b.Topics(name)
	case kmsg.ACLResourceTypeGroup:
		b.Groups(name)
	case kmsg.ACLResourceTypeTransactionalId:
		b.TransactionalIDs(name)
	case kmsg.ACLResourceTypeCluster:
		b.Clusters()
	}
	return b
}

// Allow creates the ACLs of b as SecureFake's super user, failing the test
// on any error.
func Allow(t testing.TB, addrs []string, b *kadm.ACLBuilder) {
	t.Helper()
	withAdmin(t, addrs, func(ctx context.Context, adm *kadm.Client) error {
		res, err := adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
			}
		}
		return err
	})
}

// Revoke deletes the ACLs matching b (each of its ALLOW entries) as
// SecureFake's super user, failing the test on any error or when none
// matched. The broker authorizes every later request without them: a right
// lost while a service runs.
func Revoke(t testing.TB, addrs []string, b *kadm.ACLBuilder) {
	t.Helper()
	b.AllowHosts("*")
	withAdmin(t, addrs, func(ctx context.Context, adm *kadm.Client) error {
		res, err := adm.DeleteACLs(ctx, b)
		if err != nil {
			return err
		}
		n := 0
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
			n += len(r.Deleted)
		}
		if n == 0 {
			t.Fatalf("testkafka: Revoke deleted no ACL")
		}
		return nil
	})
}

func withAdmin(t testing.TB, addrs []string, fn func(context.Context, *kadm.Client) error) {
	t.Helper()
	cl, err := kgo.NewClient(AdminOpts(addrs)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := fn(ctx, kadm.NewClient(cl)); err != nil {
		t.Fatalf("testkafka: ACLs: %v", err)
	}
}

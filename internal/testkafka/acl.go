package testkafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SecureAdmin and SecureAdminPassword are the super user of SecureFake's
// cluster: it bypasses every ACL (like a principal in Kafka's super.users).
const (
	SecureAdmin         = "admin"
	SecureAdminPassword = "admin-secret"
)

// SecureFake starts an in-process kfake broker (SkipIfReal first: the
// secured real cluster is TestSecureCluster's) that authenticates every
// client with SASL SCRAM-SHA-512 and authorizes every request with its ACLs,
// with no ACL meaning no access (Kafka's StandardAuthorizer with
// allow.everyone.if.no.acl.found=false). users maps each SCRAM user to its
// password; they start with no ACL (grant them with Allow). The super user
// is SecureAdmin. It returns the cluster and its addresses; it is closed
// when the test ends.
func SecureFake(t testing.TB, topics map[string]int32, users map[string]string) (*kfake.Cluster, []string) {
	t.Helper()
	opts := []kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-512", SecureAdmin, SecureAdminPassword)}
	for u, p := range users {
		opts = append(opts, kfake.User("SCRAM-SHA-512", u, p))
	}
	return Fake(t, topics, opts...)
}

// SASL is the client option that logs in as user with password pass
// (SCRAM-SHA-512), as SecureFake's cluster requires.
func SASL(user, pass string) kgo.Opt {
	return kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())
}

// AdminOpts are the client options of SecureFake's super user on addrs.
func AdminOpts(addrs []string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(addrs...), SASL(SecureAdmin, SecureAdminPassword)}
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

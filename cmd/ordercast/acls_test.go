package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// aclKey is one ACL as `ordercast acls -o json` prints it and as the
// broker describes it.
type aclKey struct{ Principal, Resource, Name, Pattern, Operation string }

// brokerACLs returns every ACL on the cluster at addrs, as its super user.
func brokerACLs(t *testing.T, addrs []string) []aclKey {
	t.Helper()
	cl, err := kgo.NewClient(testkafka.AdminOpts(addrs)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).DescribeACLs(ctx, kadm.NewACLs().AnyResource().Allow().AllowHosts().
		Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	if err != nil {
		t.Fatal(err)
	}
	var out []aclKey
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		for _, d := range r.Described {
			if d.Host != "*" {
				t.Errorf("ACL %+v for host %q, want any host", d, d.Host)
			}
			res := map[string]string{"TOPIC": "Topic", "GROUP": "Group", "TRANSACTIONAL_ID": "TransactionalId"}[d.Type.String()]
			out = append(out, aclKey{d.Principal, res, d.Name, d.Pattern.String(), d.Operation.String()})
		}
	}
	return out
}

func sortedACLs(keys []aclKey) []aclKey {
	slices.SortFunc(keys, func(a, b aclKey) int {
		return strings.Compare(strings.Join([]string{a.Principal, a.Resource, a.Name, a.Pattern, a.Operation}, "|"),
			strings.Join([]string{b.Principal, b.Resource, b.Name, b.Pattern, b.Operation}, "|"))
	})
	return keys
}

// TestACLsApply runs `ordercast acls --apply --create-users` as the super
// user of a broker with SCRAM and ACLs (testkafka.Secure: the embedded one
// in the default suite, the secured Kafka 4.4 node with
// ORDERCAST_TEST_SECURE_BROKERS): every row is
// created, the broker then holds exactly the printed ACL set, every
// service's SCRAM user logs in with its password and starts as its
// principal (so the set suffices: the start checks pass, no CREATE or
// cluster right is needed on existing topics). A second --apply creates
// nothing new; --apply as a service's principal (not allowed to ALTER the
// cluster) exits with an error and marks every row failed.
func TestACLsApply(t *testing.T) {
	layout := ops.Layout{Partitions: 1, ReplicationFactor: 1, RetryDelays: []time.Duration{time.Second, 10 * time.Second}} // acls' default --retry-delays
	topics := map[string]int32{}
	for _, ts := range ops.SystemTopics(layout) {
		topics[ts.Name] = ts.Partitions
	}
	addrs := testkafka.Secure(t, topics, nil)
	pwd := map[string]string{}
	var lines []string
	for _, s := range system.AllServices {
		pwd[s] = "pw-" + s
		lines = append(lines, s+"="+pwd[s])
	}
	users := filepath.Join(t.TempDir(), "users.txt")
	if err := os.WriteFile(users, []byte("# one line per service\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	as := func(user, pass string, args ...string) []string {
		args = append(args, "--brokers", strings.Join(addrs, ","), "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", user, "--sasl-password", pass)
		if testkafka.SecureReal() {
			args = append(args, "--kafka-tls", "--kafka-tls-ca", os.Getenv(testkafka.EnvSecureCA))
		}
		return args
	}
	apply := func(user, pass string, extra ...string) ([]aclRow, string, error) {
		out, err := ordercast(t, as(user, pass, append([]string{"acls", "--apply", "-o", "json"}, extra...)...)...)
		i := strings.Index(out, "[")
		if i < 0 {
			t.Fatalf("acls --apply printed no JSON (%v):\n%s", err, out)
		}
		var rows []aclRow
		if jerr := json.Unmarshal([]byte(out[i:]), &rows); jerr != nil {
			t.Fatalf("acls --apply output: %v\n%s", jerr, out)
		}
		return rows, out, err
	}

	rows, out, err := apply(testkafka.SecureAdmin, testkafka.AdminPassword(), "--create-users", users)
	if err != nil {
		t.Fatalf("acls --apply --create-users: %v\n%s", err, out)
	}
	var want []aclKey
	n := 0
	for _, svc := range system.AllServices {
		n += len(system.Rights(svc, layout))
		if !strings.Contains(out, "SCRAM-SHA-512 user ordercast-"+svc+" created or updated") {
			t.Errorf("no word of user ordercast-%s created:\n%s", svc, out)
		}
	}
	if len(rows) != n {
		t.Fatalf("%d rows, want %d (system.Rights of every service)", len(rows), n)
	}
	for _, r := range rows {
		if r.Status != "created" {
			t.Errorf("row %+v: status %q, want created", r, r.Status)
		}
		want = append(want, aclKey{r.Principal, r.Resource, r.Name, r.Pattern, r.Operation})
	}
	got := brokerACLs(t, addrs)
	if g, w := sortedACLs(got), sortedACLs(want); !slices.Equal(g, w) {
		t.Fatalf("the broker holds\n%v\nwant exactly the printed set\n%v", g, w)
	}

	// The users exist with SCRAM-SHA-512 credentials of 8192 iterations.
	// (kfake's SCRAM server announces 4096 iterations whatever a user was
	// created with, scramServerFirst, so on it they cannot log in: the
	// logins below use the same passwords re-salted with 4096 iterations.
	// TestSecureCluster logs in with the users as created, on Kafka 4.4.)
	adminCl, err := kgo.NewClient(testkafka.AdminOpts(addrs)...)
	if err != nil {
		t.Fatal(err)
	}
	defer adminCl.Close()
	adm := kadm.NewClient(adminCl)
	var names []string
	var resalt []kadm.UpsertSCRAM
	for _, svc := range system.AllServices {
		names = append(names, "ordercast-"+svc)
		resalt = append(resalt, kadm.UpsertSCRAM{User: "ordercast-" + svc, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: pwd[svc]})
	}
	described, err := adm.DescribeUserSCRAMs(context.Background(), names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range names {
		d := described[u]
		if d.Err != nil || len(d.CredInfos) != 1 || d.CredInfos[0].Mechanism != kadm.ScramSha512 || d.CredInfos[0].Iterations != 8192 {
			t.Fatalf("user %s: %+v, want one SCRAM-SHA-512 credential of 8192 iterations", u, d)
		}
	}
	if res, err := adm.AlterUserSCRAMs(context.Background(), nil, resalt); err != nil || !res.Ok() {
		t.Fatalf("re-salt the users for kfake: %v %+v", err, res)
	}

	for _, svc := range system.AllServices {
		reg := srfake.New()
		t.Cleanup(reg.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		sys, err := system.Start(ctx, system.Config{
			Services:  []string{svc},
			Kafka:     system.KafkaConfig{Brokers: addrs, Layout: layout, ClientOpts: testkafka.Login("ordercast-"+svc, pwd[svc]), Principal: "User:ordercast-" + svc},
			Schema:    system.SchemaConfig{RegistryURL: reg.URL()},
			HTTP:      system.HTTPConfig{Addr: "127.0.0.1:0"},
			DB:        system.DBConfig{DSN: "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")},
			Consumers: system.ConsumerConfig{MemberID: "m1", SessionTimeout: time.Second},
		})
		cancel()
		if err != nil {
			t.Fatalf("%s as User:ordercast-%s with the applied ACLs: %v", svc, svc, err)
		}
		if err := sys.Stop(context.Background()); err != nil {
			t.Fatalf("stop %s: %v", svc, err)
		}
	}

	if _, out, err := apply(testkafka.SecureAdmin, testkafka.AdminPassword()); err != nil {
		t.Fatalf("a second --apply: %v\n%s", err, out)
	}
	if again := brokerACLs(t, addrs); len(again) != len(got) {
		t.Fatalf("a second --apply left %d ACLs, want the same %d", len(again), len(got))
	}

	rows, out, err = apply("ordercast-orders", pwd[system.ServiceOrders], "--services", system.ServiceOrders)
	if err == nil || !strings.Contains(err.Error(), "could not be created") || !strings.Contains(err.Error(), "ALTER the cluster") {
		t.Fatalf("--apply as a service's principal: %v, want an error saying the ACLs could not be created\n%s", err, out)
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.Status, "failed: ") || !strings.Contains(r.Status, "CLUSTER_AUTHORIZATION_FAILED") {
			t.Errorf("row %+v: status %q, want failed: CLUSTER_AUTHORIZATION_FAILED", r, r.Status)
		}
	}
}

// TestACLsShareMode: `acls --notifications-mode share` adds READ,
// DESCRIBE_CONFIGS and ALTER_CONFIGS on the share group of notifications
// (its members join it and read and set its configs), and only then; a
// mode it does not know is an error naming the flag.
func TestACLsShareMode(t *testing.T) {
	rows := func(args ...string) []aclKey {
		t.Helper()
		out, err := ordercast(t, append([]string{"acls", "-o", "json", "--services", "notifications,payments"}, args...)...)
		if err != nil {
			t.Fatalf("acls %v: %v\n%s", args, err, out)
		}
		var keys []aclRow
		if err := json.Unmarshal([]byte(out), &keys); err != nil {
			t.Fatalf("acls %v: %v\n%s", args, err, out)
		}
		var share []aclKey
		for _, k := range keys {
			if k.Name == system.NotificationsShareGroup {
				share = append(share, aclKey{k.Principal, k.Resource, k.Name, k.Pattern, k.Operation})
			}
		}
		return sortedACLs(share)
	}
	if got := rows(); len(got) != 0 {
		t.Errorf("group mode: share-group rights %v, want none", got)
	}
	want := []aclKey{
		{"User:ordercast-notifications", "Group", system.NotificationsShareGroup, "LITERAL", "ALTER_CONFIGS"},
		{"User:ordercast-notifications", "Group", system.NotificationsShareGroup, "LITERAL", "DESCRIBE_CONFIGS"},
		{"User:ordercast-notifications", "Group", system.NotificationsShareGroup, "LITERAL", "READ"},
	}
	if got := rows("--notifications-mode", "share"); !slices.Equal(got, want) {
		t.Errorf("share mode: share-group rights\n%v\nwant\n%v", got, want)
	}
	if out, err := ordercast(t, "acls", "--notifications-mode", "queue"); err == nil || !strings.Contains(out+err.Error(), `--notifications-mode "queue": want group or share`) {
		t.Errorf("bad mode: err %v, output %s", err, out)
	}
}

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// aclRow is one ACL of `ordercast acls`: ALLOW Operation on the resource to
// Principal from any host.
type aclRow struct {
	Service   string `json:"service"`
	Principal string `json:"principal"`
	Resource  string `json:"resourceType"` // Topic, Group, TransactionalId
	Name      string `json:"name"`
	Pattern   string `json:"pattern"` // LITERAL or PREFIXED
	Operation string `json:"operation"`
	Status    string `json:"status,omitempty"` // with --apply: created, or failed: reason
	right     system.Right
}

func newACLs() *cobra.Command {
	var (
		f           opsFlags
		apply       bool
		prefix      string
		services    string
		retryDelays string
		usersFile   string
		notifMode   string
	)
	cmd := &cobra.Command{
		Use:   "acls",
		Short: "Print (or apply) the least-privilege Kafka ACLs of each service's principal",
		Long: `Prints the ACLs each service needs, one principal per service (User:<prefix><service>,
by default User:ordercast-payments and so on): what system.Rights derives from the topics,
groups and transactional ids the services use. Nothing else is needed, no cluster right and
no CREATE on the system topics (an admin creates those: 'ordercast topics create --system').
Run each service as its principal: ordercast run payments --sasl-mechanism SCRAM-SHA-512
--sasl-user ordercast-payments ... (see docs/security.md).

With --apply it creates the ACLs on the cluster (an admin's --sasl-user: one allowed to
alter the cluster's ACLs; creating an ACL that exists is a no-op), and with --create-users
FILE it first creates or updates the SCRAM-SHA-512 credentials of the principals: FILE holds
lines SERVICE=PASSWORD ('-' reads standard input; '#' starts a comment). The exit status is
1 when an ACL or a user could not be created.`,
		Example: `  ordercast acls
  ordercast acls -o json --services payments
  ordercast acls --apply --brokers k1:9093 --kafka-tls --sasl-mechanism SCRAM-SHA-512 --sasl-user admin --create-users users.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.output != "table" && f.output != "json" {
				return fmt.Errorf("--output %q: want table or json", f.output)
			}
			var delays []time.Duration
			for _, d := range splitList(retryDelays) {
				v, err := time.ParseDuration(d)
				if err != nil || v <= 0 {
					return fmt.Errorf("--retry-delays %q: %q is not a positive duration like 1s or 500ms", retryDelays, d)
				}
				delays = append(delays, v)
			}
			svcs := system.AllServices
			if services != "" {
				svcs = splitList(services)
				for _, s := range svcs {
					if !slices.Contains(system.AllServices, s) {
						return fmt.Errorf("--services %q: unknown service %q (want some of %s)", services, s, strings.Join(system.AllServices, ", "))
					}
				}
			}
			if usersFile != "" && !apply {
				return fmt.Errorf("--create-users needs --apply: without it nothing is sent to the cluster")
			}
			var users map[string]string
			if usersFile != "" {
				var err error
				if users, err = readUsersFile(usersFile, cmd.InOrStdin(), svcs); err != nil {
					return err
				}
			}
			if notifMode != system.NotificationsGroup && notifMode != system.NotificationsShare {
				return fmt.Errorf("--notifications-mode %q: want %s or %s (the mode the notifications service runs in)", notifMode, system.NotificationsGroup, system.NotificationsShare)
			}
			rows := aclRows(svcs, prefix, ops.Layout{RetryDelays: delays}, notifMode == system.NotificationsShare)
			var applyErr error
			if apply {
				c, err := f.dial(cmd)
				if err != nil {
					return err
				}
				defer c.Close()
				if len(users) > 0 {
					if err := createUsers(c, prefix, users, cmd.ErrOrStderr()); err != nil {
						return err
					}
				}
				applyErr = applyACLs(c, rows)
			}
			out := cmd.OutOrStdout()
			if f.output == "json" {
				if err := writeJSON(out, rows); err != nil {
					return err
				}
				return applyErr
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			head := "SERVICE\tPRINCIPAL\tRESOURCE\tNAME\tPATTERN\tOPERATION"
			if apply {
				head += "\tSTATUS"
			}
			fmt.Fprintln(tw, head)
			for _, r := range rows {
				line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", r.Service, r.Principal, r.Resource, r.Name, r.Pattern, r.Operation)
				if apply {
					line += "\t" + r.Status
				}
				fmt.Fprintln(tw, line)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return applyErr
		},
	}
	f.register(cmd, false)
	fl := cmd.Flags()
	fl.BoolVar(&apply, "apply", false, "create the ACLs on the cluster (as an admin principal)")
	fl.StringVar(&prefix, "user-prefix", "ordercast-", "each service's principal is User:<prefix><service>")
	fl.StringVar(&services, "services", "", "comma-separated services (default: all of "+strings.Join(system.AllServices, ", ")+")")
	fl.StringVar(&retryDelays, "retry-delays", "1s,10s", "the services' --retry-delays (only the count matters: one <group>.retry.N topic per delay)")
	fl.StringVar(&notifMode, "notifications-mode", system.NotificationsGroup, "the notifications service's --notifications-mode: share adds READ, DESCRIBE_CONFIGS and ALTER_CONFIGS on the share group "+system.NotificationsShareGroup)
	fl.StringVar(&usersFile, "create-users", "", "with --apply: create the principals' SCRAM-SHA-512 users from FILE of SERVICE=PASSWORD lines ('-': stdin)")
	return cmd
}

// aclRows is the table of system.Rights for svcs, principal User:<prefix><svc>.
// With share, the rights of a service in a share group are added
// (system.ShareRights: notifications with --notifications-mode share).
func aclRows(svcs []string, prefix string, l ops.Layout, share bool) []aclRow {
	var rows []aclRow
	for _, svc := range svcs {
		rights := system.Rights(svc, l)
		if share {
			rights = append(rights, system.ShareRights(svc)...)
		}
		for _, r := range rights {
			pat := "LITERAL"
			if r.Pattern == kmsg.ACLResourcePatternTypePrefixed {
				pat = "PREFIXED"
			}
			rows = append(rows, aclRow{Service: svc, Principal: "User:" + prefix + svc, Resource: r.TypeName(),
				Name: r.Name, Pattern: pat, Operation: r.Operation.String(), right: r})
		}
	}
	return rows
}

// applyACLs creates every row's ACL, one CreateACLs request per row, and
// sets its Status. It returns an error when one failed.
func applyACLs(c *opsConn, rows []aclRow) error {
	var failed int
	for i := range rows {
		r := &rows[i]
		b := kadm.NewACLs().Allow(r.Principal).AllowHosts("*").Operations(r.right.Operation)
		switch r.right.Type {
		case kmsg.ACLResourceTypeTopic:
			b.Topics(r.Name)
		case kmsg.ACLResourceTypeGroup:
			b.Groups(r.Name)
		case kmsg.ACLResourceTypeTransactionalId:
			b.TransactionalIDs(r.Name)
		}
		if r.right.Pattern == kmsg.ACLResourcePatternTypePrefixed {
			b.ResourcePatternType(kadm.ACLPatternPrefixed)
		} else {
			b.ResourcePatternType(kadm.ACLPatternLiteral)
		}
		res, err := c.adm.CreateACLs(c.ctx, b)
		if err == nil {
			for _, x := range res {
				if x.Err != nil {
					err = x.Err
					if x.ErrMessage != "" {
						err = fmt.Errorf("%w: %s", err, x.ErrMessage)
					}
				}
			}
		}
		if err != nil {
			r.Status = "failed: " + err.Error()
			failed++
			continue
		}
		r.Status = "created"
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d ACLs could not be created (is --sasl-user an admin allowed to ALTER the cluster?)", failed, len(rows))
	}
	return nil
}

// readUsersFile reads SERVICE=PASSWORD lines for --create-users.
func readUsersFile(path string, stdin io.Reader, svcs []string) (map[string]string, error) {
	var r io.Reader = stdin
	if path != "-" {
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--create-users: %w", err)
		}
		defer fh.Close()
		r = fh
	}
	users := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		svc, pass, ok := strings.Cut(line, "=")
		svc = strings.TrimSpace(svc)
		switch {
		case !ok || pass == "":
			return nil, fmt.Errorf("--create-users %s line %d: want SERVICE=PASSWORD", path, n)
		case !slices.Contains(svcs, svc):
			return nil, fmt.Errorf("--create-users %s line %d: service %q is not one of %s", path, n, svc, strings.Join(svcs, ", "))
		}
		users[svc] = pass
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--create-users %s: %w", path, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("--create-users %s: no SERVICE=PASSWORD line", path)
	}
	return users, nil
}

// createUsers upserts the SCRAM-SHA-512 credentials of each service's user
// (AlterUserScramCredentials, KIP-554; 8192 iterations) and says so on w.
func createUsers(c *opsConn, prefix string, users map[string]string, w io.Writer) error {
	var up []kadm.UpsertSCRAM
	for _, svc := range slices.Sorted(maps.Keys(users)) {
		up = append(up, kadm.UpsertSCRAM{User: prefix + svc, Mechanism: kadm.ScramSha512, Iterations: 8192, Password: users[svc]})
	}
	res, err := c.adm.AlterUserSCRAMs(c.ctx, nil, up)
	if err != nil {
		return fmt.Errorf("create SCRAM users: %w", err)
	}
	var errs []error
	for _, r := range res.Sorted() {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("SCRAM user %s: %w %s", r.User, r.Err, r.ErrMessage))
			continue
		}
		fmt.Fprintf(w, "SCRAM-SHA-512 user %s created or updated\n", r.User)
	}
	return errors.Join(errs...)
}

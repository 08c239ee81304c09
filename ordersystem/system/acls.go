package system

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/service/checkout"
	"github.com/ordercast/ordercast/ordersystem/service/fulfillment"
	"github.com/ordercast/ordercast/ordersystem/service/notifications"
	"github.com/ordercast/ordercast/ordersystem/service/orders"
	"github.com/ordercast/ordercast/ordersystem/service/payments"
	"github.com/ordercast/ordercast/outbox"
	"github.com/ordercast/ordercast/processor"
)

// consumes maps each consumer service (its group has the service's name) to
// the topics its group reads. Start subscribes the groups to these, and
// Rights grants READ on them: one list for both.
var consumes = map[string][]string{
	ServiceOrders:        orders.Topics,
	ServicePayments:      payments.Topics,
	ServiceNotifications: notifications.Topics,
	ServiceFulfillment:   fulfillment.Topics,
}

// ConsumedTopics returns the event topics the consumer group of service svc
// reads (ServiceOrders, ServicePayments, ServiceNotifications,
// ServiceFulfillment; each group has its service's name), without the
// group's own retry topics: a new slice the caller may change. It returns
// nil for a service that consumes nothing (ServiceCheckout) or an unknown
// name.
func ConsumedTopics(svc string) []string {
	return append([]string(nil), consumes[svc]...)
}

// produces maps each service to the event topics it writes (besides its
// own retry topics and DLQ), as the service packages declare them.
var produces = map[string][]string{
	ServiceCheckout:    checkout.Produces,
	ServicePayments:    payments.Produces,
	ServiceFulfillment: fulfillment.Produces,
}

// fulfillmentTxnPrefix starts every transactional id of fulfillment's
// members ("ordercast-fulfillment-<member id>-<n>", see Start).
const fulfillmentTxnPrefix = "ordercast-fulfillment-"

// Right is one ACL a service's principal needs: ALLOW Operation on the
// resource (Type, Name; Pattern LITERAL, or PREFIXED for every name that
// starts with Name) from any host. Kafka's implied operations apply (READ,
// WRITE, DELETE and ALTER imply DESCRIBE; KIP-679: WRITE on any topic
// implies IDEMPOTENT_WRITE on the cluster, so no service needs a cluster
// right).
type Right struct {
	Type      kmsg.ACLResourceType
	Name      string
	Pattern   kmsg.ACLResourcePatternType
	Operation kmsg.ACLOperation
}

// String is "WRITE on Topic paymentProcessed", with " (prefixed)" for a
// PREFIXED pattern.
func (r Right) String() string {
	s := fmt.Sprintf("%s on %s %s", r.Operation, r.TypeName(), r.Name)
	if r.Pattern == kmsg.ACLResourcePatternTypePrefixed {
		s += "* (prefixed)"
	}
	return s
}

// TypeName is the resource type as Kafka's tools write it: Topic, Group,
// TransactionalId or Cluster.
func (r Right) TypeName() string {
	switch r.Type {
	case kmsg.ACLResourceTypeTopic:
		return "Topic"
	case kmsg.ACLResourceTypeGroup:
		return "Group"
	case kmsg.ACLResourceTypeTransactionalId:
		return "TransactionalId"
	case kmsg.ACLResourceTypeCluster:
		return "Cluster"
	}
	return r.Type.String()
}

// Rights returns the least-privilege ACL set of service svc (one of
// AllServices) for topics laid out as l (only len(l.RetryDelays) matters:
// the retry topics), in a stable order. It is derived from what Start runs
// for the service:
//
//   - checkout: WRITE on orderCreated (idempotent producer).
//   - a consumer service (orders, payments, notifications, fulfillment):
//     READ on its group (named as the service) and on the topics it
//     consumes; READ and WRITE on its retry topics ("<group>.retry.<n>",
//     not fulfillment, which retries in place); WRITE on its DLQ
//     ("<group>.dlq") and on the event topics it produces; READ and WRITE
//     on its blocked-keys topic ("<group>.blocked-keys": payments and
//     orders, ops.KeyBlockGroups, when there are retry topics).
//   - payments also: WRITE on its outbox relay's transactional id
//     (outbox.TransactionalID: the relay keeps the default names) and READ,
//     WRITE and CREATE on the relay's progress marker topic
//     (outbox.MarkerTopic; CREATE because the relay creates it, compacted,
//     on its first start).
//   - fulfillment also: WRITE on the transactional ids starting with
//     "ordercast-fulfillment-" (PREFIXED; one id per member and member id).
//
// Topics are not created by the services when they exist: CREATE on the
// system topics is for an admin (`ordercast topics create --system`).
// An unknown service gives nil.
func Rights(svc string, l ops.Layout) []Right {
	var out []Right
	add := func(t kmsg.ACLResourceType, name string, pat kmsg.ACLResourcePatternType, ops ...kmsg.ACLOperation) {
		for _, op := range ops {
			out = append(out, Right{Type: t, Name: name, Pattern: pat, Operation: op})
		}
	}
	topic := func(name string, ops ...kmsg.ACLOperation) {
		add(kmsg.ACLResourceTypeTopic, name, kmsg.ACLResourcePatternTypeLiteral, ops...)
	}
	read, write := kmsg.ACLOperationRead, kmsg.ACLOperationWrite
	consumed, isConsumer := consumes[svc]
	if !isConsumer && svc != ServiceCheckout {
		return nil
	}
	if isConsumer {
		add(kmsg.ACLResourceTypeGroup, svc, kmsg.ACLResourcePatternTypeLiteral, read)
		for _, t := range consumed {
			topic(t, read)
		}
		if svc != ServiceFulfillment {
			for _, t := range processor.RetryTopicNames(svc, len(l.RetryDelays)) {
				topic(t, read, write)
			}
		}
		if len(l.RetryDelays) > 0 && slices.Contains(ops.KeyBlockGroups, svc) {
			topic(processor.BlockedKeysTopicName(svc), read, write)
		}
		topic(processor.DLQTopic(svc), write)
	}
	for _, t := range produces[svc] {
		topic(t, write)
	}
	switch svc {
	case ServicePayments:
		add(kmsg.ACLResourceTypeTransactionalId, outbox.DefaultTransactionalID(svc), kmsg.ACLResourcePatternTypeLiteral, write)
		topic(outbox.DefaultMarkerTopic(svc), read, write, kmsg.ACLOperationCreate)
	case ServiceFulfillment:
		add(kmsg.ACLResourceTypeTransactionalId, fulfillmentTxnPrefix, kmsg.ACLResourcePatternTypePrefixed, write)
	}
	return out
}

// ShareRights returns the rights a service needs on top of Rights when it
// runs in a share group (only ServiceNotifications with NotificationsMode
// NotificationsShare; nil for any other service): READ on the share group
// NotificationsShareGroup, to join it (KIP-932), and DESCRIBE_CONFIGS and
// ALTER_CONFIGS on it, with which each processor.NewQueue member reads the
// group's delivery limit and lock duration and sets
// share.auto.offset.reset=earliest when the group has none (without them
// the member logs a WARN and uses the broker's defaults, and a new group
// starts at the end of each partition). Start does not check them before
// the members join: a member refused the group stops with a
// *processor.AuthorizationError naming it.
func ShareRights(svc string) []Right {
	if svc != ServiceNotifications {
		return nil
	}
	var out []Right
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs} {
		out = append(out, Right{Type: kmsg.ACLResourceTypeGroup, Name: NotificationsShareGroup, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op})
	}
	return out
}

// topicsOf returns the system topics (ops.SystemTopics) that the services
// svcs read or write: those Start makes sure exist.
func topicsOf(svcs []string, l ops.Layout) []ops.TopicSpec {
	used := map[string]bool{}
	for _, svc := range svcs {
		for _, r := range Rights(svc, l) {
			if r.Type == kmsg.ACLResourceTypeTopic {
				used[r.Name] = true
			}
		}
	}
	var out []ops.TopicSpec
	for _, t := range ops.SystemTopics(l) {
		if used[t.Name] {
			out = append(out, t)
		}
	}
	return out
}

// MissingRightsError is Start's error when the principal lacks rights its
// services need (Rights): found before any record is read, so nothing is
// consumed, produced or committed.
type MissingRightsError struct {
	Principal string  // "User:ordercast-payments", or a description when unknown
	Missing   []Right // what the broker's authorizer does not allow, in Rights order
	Services  []string
}

func (e *MissingRightsError) Error() string {
	parts := make([]string, len(e.Missing))
	for i, r := range e.Missing {
		parts[i] = r.String()
	}
	return fmt.Sprintf("kafka principal %s lacks %s, which %s needs (grant the set with `ordercast acls --apply` as an admin; see docs/security.md)",
		e.Principal, strings.Join(parts, ", "), strings.Join(e.Services, ", "))
}

// Is makes errors.Is(err, kerr.TopicAuthorizationFailed) and the group
// and transactional-id equivalents true for the kinds of right missing.
func (e *MissingRightsError) Is(target error) bool {
	for _, r := range e.Missing {
		switch {
		case r.Type == kmsg.ACLResourceTypeTopic && target == kerr.TopicAuthorizationFailed,
			r.Type == kmsg.ACLResourceTypeGroup && target == kerr.GroupAuthorizationFailed,
			r.Type == kmsg.ACLResourceTypeTransactionalId && target == kerr.TransactionalIDAuthorizationFailed:
			return true
		}
	}
	return false
}

// principalName is cfg.Principal, or a description of the unknown one.
func principalName(p string) string {
	if p == "" {
		return "(this client's principal: no --sasl-user given)"
	}
	return p
}

// checkRights asks the broker what the client's principal may do on the
// topics and groups of rights (KIP-430 authorized operations: Metadata and
// DescribeGroups with Include...AuthorizedOperations) and whether it may
// see the transactional ids (DescribeTransactions: WRITE implies DESCRIBE,
// so a refusal means WRITE is missing too). A broker that does not report
// authorized operations (MinInt32, or no authorizer) passes. It returns a
// *MissingRightsError naming every right found missing, or the error of a
// request that failed for another reason. CREATE is not checked (it is
// needed only for a topic that is missing, and then the creation fails
// with a message of its own).
func checkRights(ctx context.Context, cl *kgo.Client, principal string, svcs []string, rights []Right, member string) error {
	merr := &MissingRightsError{Principal: principalName(principal), Services: svcs}
	var topics, groups []string
	for _, r := range rights {
		switch r.Type {
		case kmsg.ACLResourceTypeTopic:
			if !slices.Contains(topics, r.Name) {
				topics = append(topics, r.Name)
			}
		case kmsg.ACLResourceTypeGroup:
			if !slices.Contains(groups, r.Name) {
				groups = append(groups, r.Name)
			}
		}
	}
	topicOps := map[string]int32{}
	if len(topics) > 0 {
		req := kmsg.NewPtrMetadataRequest()
		req.IncludeTopicAuthorizedOperations = true
		for _, t := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			if t.Topic == nil {
				continue
			}
			switch kerr.ErrorForCode(t.ErrorCode) {
			case nil:
				topicOps[*t.Topic] = t.AuthorizedOperations
			case kerr.TopicAuthorizationFailed:
				topicOps[*t.Topic] = 0 // not even DESCRIBE
			}
		}
	}
	groupOps := map[string]int32{}
	if len(groups) > 0 {
		// The first group of a new cluster waits for __consumer_offsets.
		deadline := time.Now().Add(30 * time.Second)
		for {
			dg := kmsg.NewPtrDescribeGroupsRequest()
			dg.Groups = groups
			dg.IncludeAuthorizedOperations = true
			resp, err := dg.RequestWith(ctx, cl)
			var retry bool
			if err == nil {
				for _, g := range resp.Groups {
					switch gerr := kerr.ErrorForCode(g.ErrorCode); {
					case gerr == kerr.GroupAuthorizationFailed:
						groupOps[g.Group] = 0
					case gerr == kerr.CoordinatorNotAvailable || gerr == kerr.CoordinatorLoadInProgress || gerr == kerr.NotCoordinator:
						retry = true
					default: // a consumer-protocol group answers GROUP_ID_NOT_FOUND here; its ops are still reported
						groupOps[g.Group] = g.AuthorizedOperations
					}
				}
			} else if errors.Is(err, kerr.GroupAuthorizationFailed) {
				for _, g := range groups {
					groupOps[g] = 0
				}
			} else if errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) {
				retry = true
			} else {
				return err
			}
			if !retry || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	for _, r := range rights {
		var ops int32 = math.MinInt32
		switch r.Type {
		case kmsg.ACLResourceTypeTopic:
			if v, ok := topicOps[r.Name]; ok {
				ops = v
			}
		case kmsg.ACLResourceTypeGroup:
			if v, ok := groupOps[r.Name]; ok {
				ops = v
			}
		case kmsg.ACLResourceTypeTransactionalId:
			id := r.Name
			if r.Pattern == kmsg.ACLResourcePatternTypePrefixed {
				id += member + "-1"
			}
			dt := kmsg.NewPtrDescribeTransactionsRequest()
			dt.TransactionalIDs = []string{id}
			resp, err := dt.RequestWith(ctx, cl)
			if err == nil && len(resp.TransactionStates) == 1 {
				err = kerr.ErrorForCode(resp.TransactionStates[0].ErrorCode)
			}
			if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
				merr.Missing = append(merr.Missing, r)
			}
			continue
		}
		if r.Operation == kmsg.ACLOperationCreate || ops == math.MinInt32 {
			continue
		}
		if ops&(1<<int32(r.Operation)) == 0 {
			merr.Missing = append(merr.Missing, r)
		}
	}
	if len(merr.Missing) > 0 {
		return merr
	}
	return nil
}

// explainAuth rewrites an authorization error of a running service (one
// checkRights could not foresee, such as an ACL removed after the start)
// to name the principal and the right refused: the runtime's
// *processor.AuthorizationError and *outbox.AuthorizationError name it
// (resource, name, operation), else the rights of rights of the refused
// kind are listed. Other errors are returned as they are.
func explainAuth(err error, principal string, svc string, rights []Right) error {
	var kind kmsg.ACLResourceType
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		kind = kmsg.ACLResourceTypeTopic
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		kind = kmsg.ACLResourceTypeGroup
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		kind = kmsg.ACLResourceTypeTransactionalId
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		kind = kmsg.ACLResourceTypeCluster
	default:
		return err
	}
	var any *MissingRightsError
	if errors.As(err, &any) {
		return err
	}
	var right string
	if pe := (*processor.AuthorizationError)(nil); errors.As(err, &pe) && pe.Name != "" && pe.Operation != "" {
		right = pe.Right()
	} else if oe := (*outbox.AuthorizationError)(nil); errors.As(err, &oe) && oe.Name != "" && oe.Operation != "" {
		right = oe.Right()
	}
	if right != "" {
		return fmt.Errorf("kafka principal %s lost %s while %s ran (refused, not retried; grant it with `ordercast acls --apply` and restart; nothing past the refused records was committed): %w",
			principalName(principal), right, svc, err)
	}
	var need []string
	for _, r := range rights {
		if r.Type == kind {
			need = append(need, r.String())
		}
	}
	if kind == kmsg.ACLResourceTypeCluster {
		need = append(need, "IDEMPOTENT_WRITE on Cluster kafka-cluster (or WRITE on any topic, KIP-679)")
	}
	return fmt.Errorf("kafka principal %s was refused (it needs %s for %s; grant them with `ordercast acls --apply`): %w",
		principalName(principal), strings.Join(need, ", "), svc, err)
}

// checkTxnWrite checks, by an InitProducerID for it (fenceTransactionalID),
// that the principal may WRITE on the outbox relay's transactional id txnID:
// checkRights sees only DESCRIBE (DescribeTransactions), which WRITE
// implies but which may be granted alone. The relay's first session sends
// the same InitProducerID a moment later (fencing any other payments
// process's relay, which stands by, as it does on every start), so the
// check adds no effect of its own. It returns a *MissingRightsError naming
// WRITE on TransactionalId txnID when the broker refuses it, nil when it is
// granted, and nil with a warning logged for any other failure (the relay
// then reports it itself).
func checkTxnWrite(ctx context.Context, kopts []kgo.Opt, cfg Config, txnID string) error {
	err := fenceTransactionalID(ctx, kopts, txnID, outbox.DefaultTransactionTimeout)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return &MissingRightsError{Principal: principalName(cfg.Kafka.Principal), Services: []string{ServicePayments},
			Missing: []Right{{Type: kmsg.ACLResourceTypeTransactionalId, Name: txnID, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite}}}
	}
	cfg.Logger.Warn("could not check WRITE on the outbox relay's transactional id at start; the relay will report it", "transactional_id", txnID, "error", err)
	return nil
}

// describeKafkaErr names the cause of a failure to reach the brokers as
// principal: a SASL authentication failure (wrong user or password) or a
// TLS certificate the client does not trust (in err, or in dialErr, the
// last failed connection's error). Other errors are returned as they are.
func describeKafkaErr(err, dialErr error, principal string) error {
	switch {
	case dialErr != nil && isUntrustedCert(dialErr) && !isUntrustedCert(err):
		return describeKafkaErr(fmt.Errorf("%w: %w", err, dialErr), nil, principal)
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("kafka: the brokers refused the SASL login of %s (wrong user or password? --sasl-user, --sasl-password, KAFKA_SASL_USER, KAFKA_SASL_PASSWORD): %w", principalName(principal), err)
	case isUntrustedCert(err):
		return fmt.Errorf("kafka: the broker's TLS certificate is not trusted by this client (give the CA that signed it with --kafka-tls-ca or KAFKA_TLS_CA; default: the system roots): %w", err)
	}
	return err
}

// lastDialErr is the last failed connection's error (nil after a success).
func (p *brokerProbe) lastDialErr() error {
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	return p.dialErr
}

// isUntrustedCert reports whether err is a failed verification of a peer's
// TLS certificate (unknown CA, wrong host name, expired).
func isUntrustedCert(err error) bool {
	var (
		ua  x509.UnknownAuthorityError
		he  x509.HostnameError
		ci  x509.CertificateInvalidError
		cve *tls.CertificateVerificationError
	)
	return errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &cve)
}

// describeRegistryErr names the cause of a failed first request to the
// schema registry: credentials it refuses (HTTP 401 or 403) or a TLS
// certificate the client does not trust. Other errors are returned as they
// are.
func describeRegistryErr(err error) error {
	var re *sr.ResponseError
	switch {
	case errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden):
		return fmt.Errorf("the schema registry refused this client's credentials with HTTP %d (wrong user or password? --registry-user, --registry-password, SCHEMA_REGISTRY_USER, SCHEMA_REGISTRY_PASSWORD): %w", re.StatusCode, err)
	case isUntrustedCert(err):
		return fmt.Errorf("the schema registry's TLS certificate is not trusted by this client (give the CA that signed it with --registry-tls-ca or SCHEMA_REGISTRY_TLS_CA; default: the system roots): %w", err)
	}
	return err
}

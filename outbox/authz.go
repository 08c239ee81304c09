package outbox

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// AuthorizationError is returned by [Relay.Run] when the broker's
// authorizer refuses one of the relay's requests: an ACL it needs is
// missing, or was deleted while it ran. The Kafka protocol errors taken as
// such are TOPIC_AUTHORIZATION_FAILED (WRITE on a row's topic, or on the
// progress marker topic), TRANSACTIONAL_ID_AUTHORIZATION_FAILED (WRITE on
// the relay's transactional id: InitProducerID, AddPartitionsToTxn, EndTxn),
// GROUP_AUTHORIZATION_FAILED and CLUSTER_AUTHORIZATION_FAILED
// (IDEMPOTENT_WRITE, for a principal with no WRITE on any topic).
//
// Run stops rather than retrying: no retry fixes a missing ACL, and a relay
// that retried for ever would look alive while the outbox grows (the Java
// producer treats these errors as fatal too). Nothing is lost: a row is
// marked sent only after Kafka acknowledged it (or, in the exactly-once
// mode, after its transaction committed), so the refused rows stay unsent
// and the next Run publishes them once the right is granted.
//
// Name is empty when the refused request does not say which resource it
// was about. The relay does not know its principal (the SASL user is in its
// client options): callers that do name it.
type AuthorizationError struct {
	Relay     string // the relay's name (NewTransactionalRelay), "" for NewRelay's
	Resource  string // "Topic", "Group", "TransactionalId" or "Cluster", as Kafka's tools write them
	Name      string // the topic or transactional id; "" when unknown
	Operation string // the ACL operation refused: "WRITE", "DESCRIBE", "IDEMPOTENT_WRITE"; "" when unknown
	Request   string // what was refused: "produce", "init producer id", "marker topic", "transaction"
	Err       error  // the kerr error, wrapped
}

func (e *AuthorizationError) Error() string {
	var ke *kerr.Error
	code := e.Err.Error()
	if errors.As(e.Err, &ke) {
		code = ke.Message
	}
	relay := "outbox relay"
	if e.Relay != "" {
		relay += " " + e.Relay
	}
	return fmt.Sprintf("%s: the broker refused %s (%s, in %s): not retried; grant the ACL and restart (the refused rows stay unsent)",
		relay, e.Right(), code, e.Request)
}

func (e *AuthorizationError) Unwrap() error { return e.Err }

// Right is the missing ACL as "WRITE on Topic paymentProcessed" (with
// "access" and "(name unknown)" standing in for what is not known).
func (e *AuthorizationError) Right() string {
	op, name := e.Operation, " "+e.Name
	if op == "" {
		op = "access"
	}
	if e.Name == "" {
		name = " (name unknown)"
	}
	return op + " on " + e.Resource + name
}

// authzError returns err as an *AuthorizationError of the relay for
// request, or nil when err is no authorization error (an
// *AuthorizationError in err is returned as it is). A topic error names
// topic with topicOp; a transactional-id error the relay's transactional id
// (WRITE); a cluster error IDEMPOTENT_WRITE.
func (r *Relay) authzError(err error, request, topic, topicOp string) *AuthorizationError {
	if err == nil {
		return nil
	}
	if ae := (*AuthorizationError)(nil); errors.As(err, &ae) {
		return ae
	}
	ae := &AuthorizationError{Request: request, Err: err}
	if r.txn != nil {
		ae.Relay = r.txn.name
	}
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		ae.Resource, ae.Name, ae.Operation = "Topic", topic, topicOp
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		ae.Resource, ae.Operation = "TransactionalId", "WRITE"
		if r.txn != nil {
			ae.Name = r.txn.txnID + r.txn.idSuffix
		}
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		ae.Resource = "Group"
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		ae.Resource, ae.Name, ae.Operation = "Cluster", "kafka-cluster", "IDEMPOTENT_WRITE"
	default:
		return nil
	}
	return ae
}

// produceAuthzError is authzError for the results of a produce: a topic
// error names the topic of the first record refused, with WRITE.
func (r *Relay) produceAuthzError(err error, results kgo.ProduceResults) *AuthorizationError {
	topic := ""
	for _, res := range results {
		if res.Err != nil && res.Record != nil {
			topic = res.Record.Topic
			break
		}
	}
	return r.authzError(err, "produce", topic, "WRITE")
}

// stopOnAuthz logs err at ERROR and returns it as an *AuthorizationError
// when it is one (Run then returns it), and nil otherwise.
func (r *Relay) stopOnAuthz(err error) error {
	request := "transaction"
	if r.txn == nil {
		request = "produce"
	}
	ae := r.authzError(err, request, "", "")
	if ae == nil {
		return nil
	}
	r.logger.Error("outbox relay: authorization refused; stopping", "right", ae.Right(), "error", err)
	return ae
}

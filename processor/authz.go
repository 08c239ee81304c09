package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// AuthorizationError is returned by Run (Processor and TxnProcessor) when
// the broker's authorizer refuses one of the member's requests: an ACL the
// member needs is missing, typically deleted while it ran (a start check
// such as the order system's cannot see the future). The Kafka protocol
// errors taken as such are TOPIC_AUTHORIZATION_FAILED,
// GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED and
// CLUSTER_AUTHORIZATION_FAILED, whatever request answered them: a fetch or
// the metadata behind it, an offset fetch or commit, a retry-topic or DLQ
// write, a transaction's produce, AddPartitionsToTxn, TxnOffsetCommit,
// EndTxn or InitProducerID, and a handler's own request (an error the
// handler returns that wraps one of them). TxnProcessor's refused DLQ write
// is returned as the *DeadLetterError that stops the stage, wrapping an
// *AuthorizationError (errors.As finds it).
//
// Why Run stops rather than retrying: no retry can fix a missing ACL, and
// retrying it for ever would leave a member that looks alive while it moves
// nothing (or, for a handler's refused write, sends every record on to the
// retry topics and the DLQ as if the record were at fault). The Java
// clients treat these errors as fatal too (KafkaConsumer.poll throws
// TopicAuthorizationException and GroupAuthorizationException; a
// transactional producer's TransactionalIdAuthorizationException is fatal).
// The process exits naming the right, an operator grants it, the restart
// resumes from the committed offsets.
//
// What is committed: nothing past the records whose effects were not
// written. The record whose write or handler call was refused is not
// completed (not sent to a retry topic or the DLQ); on the way out Run
// commits the contiguous run of records that completed before it, as on any
// shutdown. TxnProcessor aborts the open transaction (or, when EndTxn
// itself is refused, leaves it to the coordinator, which aborts it at the
// transaction timeout): its outputs and offsets are never committed.
//
// Resource and Operation name the ACL when the runtime knows it (READ on
// the source topic for a fetch, READ on the group for a commit, WRITE on the
// target of a retry-topic or DLQ write or on a transaction's output topic,
// WRITE on the transactional id); Name is empty when the refused request
// does not say which resource it was about (a handler's error: wrap it in
// an *AuthorizationError of your own to name it, and Run passes it on
// unchanged). The member does not know its principal (the SASL user is in
// its client options): callers that do name it (the order system does).
type AuthorizationError struct {
	Group     string // the member's group
	Resource  string // "Topic", "Group", "TransactionalId" or "Cluster", as Kafka's tools write them
	Name      string // the topic, group or transactional id ("" when unknown; "kafka-cluster" for Cluster)
	Operation string // the ACL operation refused: "READ", "WRITE", "IDEMPOTENT_WRITE"; "" when unknown
	Request   string // what was refused: "fetch", "group session", "offset commit", "retry/DLQ write", "handler", "produce", "transaction"
	Err       error  // the kerr error, wrapped
}

func (e *AuthorizationError) Error() string {
	return fmt.Sprintf("processor: group %s: the broker refused %s on %s (%v, in %s): not retried; grant the ACL and restart (nothing past the last completed record is committed)",
		e.Group, e.right(), e.resource(), kerrName(e.Err), e.Request)
}

func (e *AuthorizationError) Unwrap() error { return e.Err }

// Right is the missing ACL as "WRITE on Topic paymentProcessed" (with
// "access" and "(name unknown)" standing in for what is not known).
func (e *AuthorizationError) Right() string { return e.right() + " on " + e.resource() }

func (e *AuthorizationError) right() string {
	if e.Operation == "" {
		return "access"
	}
	return e.Operation
}

func (e *AuthorizationError) resource() string {
	if e.Name == "" {
		return e.Resource + " (name unknown)"
	}
	return e.Resource + " " + e.Name
}

// kerrName is the protocol name of the kerr error in err
// (TOPIC_AUTHORIZATION_FAILED), or err's text.
func kerrName(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}

// IsAuthorization reports whether err is, or wraps, one of the Kafka
// authorization errors that AuthorizationError describes.
func IsAuthorization(err error) bool { return authzResource(err) != "" }

// authzResource is the resource type an authorization error in err is
// about ("Topic", "Group", "TransactionalId", "Cluster"), or "" when err is
// none.
func authzResource(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return "Topic"
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return "Group"
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return "TransactionalId"
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return "Cluster"
	}
	return ""
}

// authzError returns err as an *AuthorizationError of group for request,
// or nil when err is no authorization error. An *AuthorizationError in err
// is returned as it is. Otherwise the resource is named from what the
// caller knows: topic (with topicOp) for a topic error, the group (READ)
// for a group error, txnID (WRITE) for a transactional-id error, the
// cluster for a cluster error.
func authzError(err error, group, request, topic, topicOp, txnID string) *AuthorizationError {
	kind := authzResource(err)
	if kind == "" {
		return nil
	}
	if ae := (*AuthorizationError)(nil); errors.As(err, &ae) {
		return ae
	}
	ae := &AuthorizationError{Group: group, Resource: kind, Request: request, Err: err}
	switch kind {
	case "Topic":
		ae.Name, ae.Operation = topic, topicOp
	case "Group":
		ae.Name, ae.Operation = group, "READ"
	case "TransactionalId":
		ae.Name, ae.Operation = txnID, "WRITE"
	case "Cluster":
		ae.Name = "kafka-cluster"
		if request == "produce" || request == "retry/DLQ write" {
			ae.Operation = "IDEMPOTENT_WRITE" // InitProducerID of an idempotent producer
		}
	}
	return ae
}

// authzStop makes a Processor's Run stop with the first authorization error
// any of its stages met: the poll loop, a worker (handler, retry/DLQ
// write), the committer.
type authzStop struct {
	mu     sync.Mutex
	err    *AuthorizationError
	cancel context.CancelFunc // ends Run's poll loop; nil before Run
}

// runContext derives the poll loop's context from Run's.
func (s *authzStop) runContext(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	return ctx
}

// stop records ae (the first one wins) and ends the poll loop; Run then
// shuts down as on a cancellation and returns ae.
func (s *authzStop) stop(ae *AuthorizationError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = ae
	}
	if s.cancel != nil {
		s.cancel()
	}
}

// result is the error Run returns for a poll loop that ended with err: err
// when the poll loop met a fatal error itself (a refusal met later, by the
// shutdown's final commit, is its consequence), else the first refusal
// another stage met, else err.
func (s *authzStop) result(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return s.err
	}
	return err
}

// authzFailed stops the member when err, met by request, is an
// authorization error, logging it at ERROR. It reports whether it did; the
// caller then leaves the record it was about uncompleted.
func (p *Processor) authzFailed(err error, request, topic, topicOp string) bool {
	ae := authzError(err, p.cfg.group, request, topic, topicOp, "")
	if ae == nil {
		return false
	}
	p.cfg.logger.Error("authorization refused; stopping the member", "right", ae.Right(), "request", request, "error", err)
	p.authz.stop(ae)
	return true
}

// fetchAuthzError is the *AuthorizationError of a fetch error (a fetch, the
// metadata or offset fetch behind it: READ, or DESCRIBE, on topic; the
// group's READ), or nil.
func fetchAuthzError(group, topic string, err error) *AuthorizationError {
	request := "fetch"
	var gs *kgo.ErrGroupSession
	if errors.As(err, &gs) {
		err, request = gs.Err, "group session"
	}
	return authzError(err, group, request, topic, "READ", "")
}

// txnAuthzError is the *AuthorizationError of a transactional member's
// failure err in request, or nil: a topic error names the output topic of
// rec with WRITE (nil rec: topic and operation unknown), a group error the
// group's READ, a transactional-id error WRITE on the member's id.
func (t *TxnProcessor) txnAuthzError(err error, request string, rec *kgo.Record) *AuthorizationError {
	topic, op := "", ""
	if rec != nil {
		topic, op = rec.Topic, "WRITE"
	}
	return authzError(err, t.cfg.group, request, topic, op, t.txnID)
}

// authzFailedLocked is authzFailed for the outcome err of it, the head of
// lane l: a handler's error, or a retry-topic/DLQ write's (WRITE on its
// target, which Health then shows as blocked until Run returns). p.mu held.
func (p *Processor) authzFailedLocked(l *lane, it *item, err error) bool {
	if it.stage != stageForward {
		return p.authzFailed(err, "handler", "", "")
	}
	if !p.authzFailed(err, "retry/DLQ write", it.fail.target, "WRITE") {
		return false
	}
	l.part.blocked = fmt.Errorf("writing offset %d to %s: %w", it.rec.Offset, it.fail.target, err)
	return true
}

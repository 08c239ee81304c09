package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoTopicHandler is wrapped, as a permanent error (so the record goes to
// the DLQ), by the handler ByTopic returns for a record of a topic it has
// no handler for and no fallback.
var ErrNoTopicHandler = errors.New("processor: no handler for the record's topic")

// topicHandler is one HandleTopic option.
type topicHandler struct {
	topic string
	h     Handler
}

// ByTopic returns a Handler that calls handlers[r.Topic] for a record, or
// fallback for a topic not in handlers. For a topic with neither (fallback
// nil) it returns a permanent error wrapping ErrNoTopicHandler, so the
// record goes to the DLQ (or, with DeadLetter(false), stays uncommitted and
// is retried). For records of the group's retry topics r.Topic is the
// original topic (see Handler), so they reach their topic's handler. The
// map is copied; the returned Handler is safe for concurrent use if the
// handlers are.
func ByTopic(handlers map[string]Handler, fallback Handler) Handler {
	m := make(map[string]Handler, len(handlers))
	for t, h := range handlers {
		if h != nil {
			m[t] = h
		}
	}
	return func(ctx context.Context, r *kgo.Record) error {
		if h := m[r.Topic]; h != nil {
			return h(ctx, r)
		}
		if fallback != nil {
			return fallback(ctx, r)
		}
		return Permanent(fmt.Errorf("topic %s: %w", r.Topic, ErrNoTopicHandler))
	}
}

// resolveTopicHandlers checks the HandleTopic options and, if there are
// any, makes c.handler dispatch by topic (validate calls it first). It
// returns the problems found.
func (c *cfg) resolveTopicHandlers() []error {
	if len(c.topicHandlers) == 0 {
		return nil
	}
	var errs []error
	m := make(map[string]Handler, len(c.topicHandlers))
	for _, th := range c.topicHandlers {
		switch {
		case th.h == nil:
			errs = append(errs, fmt.Errorf("HandleTopic(%q): nil handler", th.topic))
		case !slices.Contains(c.topics, th.topic):
			errs = append(errs, fmt.Errorf("HandleTopic(%q): not one of Topics %q", th.topic, c.topics))
		case m[th.topic] != nil:
			errs = append(errs, fmt.Errorf("HandleTopic(%q): given twice", th.topic))
		default:
			m[th.topic] = th.h
		}
	}
	if c.handler == nil {
		for _, t := range c.topics {
			if m[t] == nil && !slices.ContainsFunc(c.topicHandlers, func(th topicHandler) bool { return th.topic == t }) {
				errs = append(errs, fmt.Errorf("topic %q has no handler: give it a HandleTopic, or a WithHandler for the topics without one", t))
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	c.handler = ByTopic(m, c.handler)
	return nil
}

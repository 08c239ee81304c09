package processor

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers the runtime sets on retry-topic and DLQ records, under the default
// prefix DefaultHeaderPrefix; with HeaderPrefix(p) each name is p followed by
// the part after "ordercast-". Every hop replaces the headers with the
// prefix (it never appends a second copy) and keeps all others; the
// original coordinates are those of the record as first consumed, before
// any retry topic. Times are Unix milliseconds in decimal.
const (
	DefaultHeaderPrefix     = "ordercast-"
	HeaderOriginalTopic     = "ordercast-original-topic"
	HeaderOriginalPartition = "ordercast-original-partition"
	HeaderOriginalOffset    = "ordercast-original-offset"
	HeaderOriginalTimestamp = "ordercast-original-timestamp"
	HeaderConsumerGroup     = "ordercast-consumer-group"
	HeaderErrorClass        = "ordercast-error-class"
	HeaderErrorMessage      = "ordercast-error-message"
	HeaderAttempts          = "ordercast-attempts"
	HeaderFirstFailure      = "ordercast-first-failure"
	HeaderLastFailure       = "ordercast-last-failure"
	HeaderRetryDue          = "ordercast-retry-due"
	// HeaderErrorStack is the goroutine stack of a handler panic, set when
	// the error wraps a *PanicError (every mode recovers a panic into one,
	// as the Recover middleware of package processor/middleware does), cut
	// to at most 8 KiB.
	HeaderErrorStack = "ordercast-error-stack"
	// HeaderReplayed marks a record written back from a DLQ by a replay
	// tool; its value is "<dlq topic>/<partition>/<offset>". The runtime
	// keeps it on the records it forwards, and shows it to the handler.
	HeaderReplayed = "ordercast-replayed-from"
)

// headerNames are the runtime's header names under one prefix.
type headerNames struct {
	prefix                                                       string
	originalTopic, originalPartition, originalOffset, originalTS string
	group, errorClass, errorMessage, attempts                    string
	firstFailure, lastFailure, retryDue, replayed, errorStack    string
}

func newHeaderNames(prefix string) headerNames {
	n := func(def string) string { return prefix + strings.TrimPrefix(def, DefaultHeaderPrefix) }
	return headerNames{
		prefix:        prefix,
		originalTopic: n(HeaderOriginalTopic), originalPartition: n(HeaderOriginalPartition),
		originalOffset: n(HeaderOriginalOffset), originalTS: n(HeaderOriginalTimestamp),
		group: n(HeaderConsumerGroup), errorClass: n(HeaderErrorClass), errorMessage: n(HeaderErrorMessage),
		attempts: n(HeaderAttempts), firstFailure: n(HeaderFirstFailure), lastFailure: n(HeaderLastFailure),
		retryDue: n(HeaderRetryDue), replayed: n(HeaderReplayed), errorStack: n(HeaderErrorStack),
	}
}

// forward writes it to its retry topic or the DLQ with the original key,
// value (a null value stays null) and headers, plus the runtime's headers.
// The partition is chosen by the producer's partitioner from the key, never
// copied from the source partition, so a DLQ with fewer partitions than its
// source works (docs/scenarios.md S11).
//
// It returns the record written (with its partition and offset) or the
// error of the write.
func (p *Processor) forward(ctx context.Context, it *item) (*kgo.Record, error) {
	rec := &kgo.Record{
		Topic:   it.fail.target,
		Key:     it.rec.Key,
		Value:   it.rec.Value,
		Headers: forwardHeaders(&p.cfg, p.retryIndex, it),
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if t := p.cfg.tracer; t != nil {
		var done func(error)
		ctx, done = t.Forward(ctx, p.cfg.group, it.view, rec.Topic, p.isDLQ(rec.Topic), it.fail.lastErr)
		err := p.prod.ProduceSync(ctx, rec).FirstErr()
		done(err)
		if err != nil {
			return nil, err
		}
		return rec, nil
	}
	if err := p.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return nil, err
	}
	return rec, nil
}

// forwardHeaders are the headers of it's record written to a retry topic or
// the DLQ under c: the record's own (but for earlier runtime headers other
// than the replay mark), then its origin, group, error and attempts, and for
// a retry topic (retryIndex: topic -> hop, nil in the exactly-once mode) the
// time it is due.
func forwardHeaders(c *cfg, retryIndex map[string]int, it *item) []kgo.RecordHeader {
	hn := &c.hdr
	var hs []kgo.RecordHeader
	for _, h := range it.rec.Headers {
		if !strings.HasPrefix(h.Key, hn.prefix) || h.Key == hn.replayed {
			hs = append(hs, h)
		}
	}
	add := func(k, v string) { hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	v := it.view
	add(hn.originalTopic, v.Topic)
	add(hn.originalPartition, strconv.Itoa(int(v.Partition)))
	add(hn.originalOffset, strconv.FormatInt(v.Offset, 10))
	add(hn.originalTS, ms(v.Timestamp))
	add(hn.group, c.group)
	f := it.fail // set: only a failed record is forwarded
	add(hn.errorClass, ErrorClass(f.lastErr))
	add(hn.errorMessage, trimMessage(f.lastErr.Error(), c.errorMsgMax))
	if pe := (*PanicError)(nil); errors.As(f.lastErr, &pe) && len(pe.Stack) > 0 {
		add(hn.errorStack, trimMessage(string(pe.Stack), maxStackHeader))
	}
	add(hn.attempts, strconv.Itoa(f.attempts))
	add(hn.firstFailure, ms(f.first))
	add(hn.lastFailure, ms(f.last))
	if i, ok := retryIndex[f.target]; ok {
		add(hn.retryDue, ms(time.Now().Add(c.retryDelays[i])))
	}
	return hs
}

// maxStackHeader is the most bytes of HeaderErrorStack.
const maxStackHeader = 8 << 10

// trimMessage cuts s to at most max bytes on a rune boundary, marking the cut.
func trimMessage(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

package processor

import (
	"context"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers the runtime sets on retry-topic and DLQ records. Every hop replaces
// the headers with this prefix (it never appends a second copy); the original
// coordinates are those of the record as first consumed, before any retry
// topic. Times are Unix milliseconds in decimal.
const (
	headerPrefix            = "ordercast-"
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
	// HeaderReplayed marks a record written back by `ordercast dlq replay`;
	// its value is "<dlq topic>/<partition>/<offset>".
	HeaderReplayed = "ordercast-replayed-from"
)

// forward writes it to its retry topic or the DLQ with the original key,
// value (a null value stays null) and headers, plus the runtime's headers.
// The partition is chosen by the producer's partitioner from the key, never
// copied from the source partition, so a DLQ with fewer partitions than its
// source works (SCENARIOS S11).
func (p *Processor) forward(ctx context.Context, it *item) error {
	rec := &kgo.Record{
		Topic:   it.target,
		Key:     it.rec.Key,
		Value:   it.rec.Value,
		Headers: p.forwardHeaders(it),
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return p.prod.ProduceSync(ctx, rec).FirstErr()
}

func (p *Processor) forwardHeaders(it *item) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for _, h := range it.rec.Headers {
		if !strings.HasPrefix(h.Key, headerPrefix) || h.Key == HeaderReplayed {
			hs = append(hs, h)
		}
	}
	add := func(k, v string) { hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	v := it.view
	add(HeaderOriginalTopic, v.Topic)
	add(HeaderOriginalPartition, strconv.Itoa(int(v.Partition)))
	add(HeaderOriginalOffset, strconv.FormatInt(v.Offset, 10))
	add(HeaderOriginalTimestamp, ms(v.Timestamp))
	add(HeaderConsumerGroup, p.cfg.group)
	add(HeaderErrorClass, ErrorClass(it.lastErr))
	add(HeaderErrorMessage, trimMessage(it.lastErr.Error(), p.cfg.errorMsgMax))
	add(HeaderAttempts, strconv.Itoa(it.attempts))
	add(HeaderFirstFailure, ms(it.first))
	add(HeaderLastFailure, ms(it.last))
	if i, ok := p.retryIndexOf(it.target); ok {
		add(HeaderRetryDue, ms(time.Now().Add(p.cfg.retryDelays[i])))
	}
	return hs
}

func (p *Processor) retryIndexOf(topic string) (int, bool) {
	i, ok := p.retryIndex[topic]
	return i, ok
}

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

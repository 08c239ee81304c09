package processor

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// backoff returns the delay before in-place attempt n+1 (n >= 1): exponential
// from min (min * 2^(n-1)), capped at max, with jitter drawn uniformly from
// [d/2, d] ("equal jitter", AWS Architecture Blog, "Exponential Backoff And
// Jitter", 2015) so that members retrying together spread out.
func backoff(n int, min, max time.Duration) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(half+1)
}

// nextTarget returns where a record that exhausted its attempts in this hop
// goes: the next retry topic for a transient failure, else the DLQ; "" when
// the DLQ is disabled.
func (p *Processor) nextTarget(it *item, permanent bool) string {
	if !permanent {
		next := 0
		if i, ok := p.retryIndex[it.rec.Topic]; ok {
			next = i + 1
		}
		if next < len(p.retryTopics) {
			return p.retryTopics[next]
		}
	}
	if p.cfg.dlq {
		return p.cfg.dlqTopic
	}
	return ""
}

func (p *Processor) isDLQ(topic string) bool { return p.cfg.dlq && topic == p.cfg.dlqTopic }

// restoreFromRetry prepares a record fetched from one of the group's retry
// topics: its due time, the attempts and failure times of earlier hops, and a
// view with the original topic, partition, offset and timestamp for the
// handler.
func (p *Processor) restoreFromRetry(it *item) {
	r := it.rec
	hn := &p.cfg.hdr
	view := *r
	view.Headers = nil
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case hn.retryDue:
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				it.failState().due = time.UnixMilli(ms)
			}
		case hn.attempts:
			it.failState().attempts, _ = strconv.Atoi(v)
		case hn.firstFailure:
			it.failState().first = parseMillis(v)
		case hn.originalTopic:
			view.Topic = v
		case hn.originalPartition:
			if n, err := strconv.ParseInt(v, 10, 32); err == nil {
				view.Partition = int32(n)
			}
		case hn.originalOffset:
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				view.Offset = n
			}
		case hn.originalTS:
			view.Timestamp = parseMillis(v)
		}
		if !strings.HasPrefix(h.Key, hn.prefix) || h.Key == hn.replayed {
			view.Headers = append(view.Headers, h)
		}
	}
	it.view = &view
}

func parseMillis(v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

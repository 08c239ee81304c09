package chaos

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ordercast/ordercast/ordersystem/order"
)

// Recovery is how long one group took, after one fault ended, to consume
// and commit everything that was in its input topics when it ended.
type Recovery struct {
	Fault   string    `json:"fault"`
	Target  string    `json:"target"`
	Group   string    `json:"group"`
	EndedAt time.Time `json:"endedAt"`
	// Seconds from the fault's end until every partition of the group's
	// topics (its retry topics included) had a committed offset at or past
	// the end offset (high watermark) it had when the fault ended.
	Seconds float64 `json:"seconds"`
	// AtDrain: not reached during the fault phase (or a transaction
	// marker was the last offset and no record followed); Seconds is then
	// until the drain found every lag 0 in records.
	AtDrain bool `json:"atDrain,omitempty"`
}

type pendingRecovery struct {
	Recovery
	targets map[string]map[int32]int64 // topic -> partition -> end offset at the fault's end; nil until listed
}

// recoveries samples the groups' committed offsets and end offsets every
// second and turns each fault's end into one Recovery per group.
type recoveries struct {
	adm *kadm.Client

	mu      sync.Mutex
	pending []*pendingRecovery
	done    []Recovery
	down    [][2]time.Time // windows with a Kafka node down (killed or paused)
}

func (r *recoveries) faultEnded(kind, target string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range order.Groups {
		r.pending = append(r.pending, &pendingRecovery{Recovery: Recovery{Fault: kind, Target: target, Group: g, EndedAt: now}})
	}
}

func (r *recoveries) nodeWasDown(from, to time.Time) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = append(r.down, [2]time.Time{from, to})
}

// downAt reports whether a node was down at t.
func (r *recoveries) downAt(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.down {
		if !t.Before(w[0]) && !t.After(w[1]) {
			return true
		}
	}
	return false
}

// loop samples until ctx ends.
func (r *recoveries) loop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.sample(ctx)
	}
}

// sample reads the end offsets and the committed offsets once and settles
// the pending recoveries they show.
func (r *recoveries) sample(ctx context.Context) {
	r.mu.Lock()
	n := len(r.pending)
	r.mu.Unlock()
	if n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var topics []string
	seen := map[string]bool{}
	for _, g := range order.Groups {
		for _, t := range groupTopics(g) {
			if !seen[t] {
				seen[t] = true
				topics = append(topics, t)
			}
		}
	}
	ends, err := r.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return
	}
	endMap := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			if endMap[o.Topic] == nil {
				endMap[o.Topic] = map[int32]int64{}
			}
			endMap[o.Topic][o.Partition] = o.Offset
		}
	})
	committed := map[string]kadm.OffsetResponses{}
	for _, g := range order.Groups {
		resp, err := r.adm.FetchOffsets(ctx, g)
		if err != nil {
			return
		}
		committed[g] = resp
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	left := r.pending[:0]
	for _, p := range r.pending {
		if p.targets == nil {
			p.targets = map[string]map[int32]int64{}
			for _, t := range groupTopics(p.Group) {
				p.targets[t] = endMap[t]
			}
		}
		caught := true
		for t, parts := range p.targets {
			for part, end := range parts {
				at := int64(0)
				if o, ok := committed[p.Group].Lookup(t, part); ok && o.Err == nil && o.At > 0 {
					at = o.At
				}
				if at < end {
					caught = false
				}
			}
		}
		if caught {
			p.Seconds = now.Sub(p.EndedAt).Seconds()
			r.done = append(r.done, p.Recovery)
			continue
		}
		left = append(left, p)
	}
	r.pending = left
}

// settle closes the recoveries still pending at the drain's end (lag 0).
func (r *recoveries) settle(drainedAt time.Time) []Recovery {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pending {
		p.Seconds, p.AtDrain = drainedAt.Sub(p.EndedAt).Seconds(), true
		r.done = append(r.done, p.Recovery)
	}
	r.pending = nil
	out := append([]Recovery{}, r.done...)
	sort.Slice(out, func(i, j int) bool { return out[i].EndedAt.Before(out[j].EndedAt) })
	return out
}

// RecoverySummary is the longest and the median recovery per fault kind,
// over every group, in seconds.
type RecoverySummary struct {
	Faults int     `json:"faults"`
	Median float64 `json:"medianSeconds"`
	Max    float64 `json:"maxSeconds"`
	Group  string  `json:"slowestGroup"`
}

func summarizeRecoveries(rs []Recovery) map[string]RecoverySummary {
	byKind := map[string][]Recovery{}
	for _, r := range rs {
		byKind[r.Fault] = append(byKind[r.Fault], r)
	}
	out := map[string]RecoverySummary{}
	for k, list := range byKind {
		// the time a fault took to be recovered from is its slowest group's
		ends := map[time.Time]Recovery{}
		for _, r := range list {
			if cur, ok := ends[r.EndedAt]; !ok || r.Seconds > cur.Seconds {
				ends[r.EndedAt] = r
			}
		}
		var secs []float64
		s := RecoverySummary{Faults: len(ends)}
		for _, r := range ends {
			secs = append(secs, r.Seconds)
			if r.Seconds > s.Max {
				s.Max, s.Group = r.Seconds, r.Group
			}
		}
		sort.Float64s(secs)
		s.Median = secs[len(secs)/2]
		out[k] = s
	}
	return out
}

func fmtRecoveries(m map[string]RecoverySummary) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		s := m[k]
		parts = append(parts, fmt.Sprintf("%s %d× median %.1fs max %.1fs (%s)", k, s.Faults, s.Median, s.Max, s.Group))
	}
	if len(parts) == 0 {
		return "none"
	}
	return joinParts(parts)
}

func joinParts(parts []string) string {
	s := ""
	for i, p := range parts {
		if i > 0 {
			s += "; "
		}
		s += p
	}
	return s
}

package chaos

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

// event is one line of the history (history.jsonl in the data directory):
// what the harness did and saw, in the order it happened.
type event struct {
	T           time.Time `json:"t"`
	Ev          string    `json:"ev"` // start, exit, start_failed, fault, order, phase, check
	Proc        string    `json:"proc,omitempty"`
	PID         int       `json:"pid,omitempty"`
	Incarnation int       `json:"incarnation,omitempty"`
	Code        int       `json:"code,omitempty"`
	Signal      string    `json:"signal,omitempty"`
	Fault       string    `json:"fault,omitempty"`
	Key         string    `json:"key,omitempty"`     // order: Idempotency-Key
	Status      int       `json:"status,omitempty"`  // order: final HTTP status
	OrderID     string    `json:"orderId,omitempty"` // order: accepted order id
	Reason      string    `json:"reason,omitempty"`  // order: rejection code
	Attempts    int       `json:"attempts,omitempty"`
	Detail      string    `json:"detail,omitempty"`
}

// history appends events to a file and keeps the counts the summary needs.
type history struct {
	mu     sync.Mutex
	f      *os.File
	enc    *json.Encoder
	faults map[string]int // injected process faults by kind
	starts int
}

func newHistory(path string) (*history, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &history{f: f, enc: json.NewEncoder(f), faults: map[string]int{}}, nil
}

func (h *history) add(e event) {
	e.T = time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.Ev {
	case "fault":
		h.faults[e.Fault]++
	case "start":
		h.starts++
	}
	_ = h.enc.Encode(e)
}

func (h *history) faultCounts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.faults))
	for k, v := range h.faults {
		out[k] = v
	}
	return out
}

func (h *history) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.f.Close()
}

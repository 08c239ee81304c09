package processor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDrainTimeoutFollowsRebalanceTimeout: a DrainTimeout at or above the
// RebalanceTimeout is refused naming both; without DrainTimeout the default
// (10s) is cut to half a shorter RebalanceTimeout.
func TestDrainTimeoutFollowsRebalanceTimeout(t *testing.T) {
	nop := func(context.Context, *kgo.Record) error { return nil }
	base := []Opt{Brokers("127.0.0.1:1"), Group("g"), Topics("t"), WithHandler(nop)}
	_, err := New(append(base, RebalanceTimeout(10*time.Second), DrainTimeout(2*time.Minute))...)
	if err == nil || !strings.Contains(err.Error(), "DrainTimeout: 2m0s, want less than RebalanceTimeout (10s)") {
		t.Fatalf("DrainTimeout over RebalanceTimeout: err %v", err)
	}
	for _, c := range []struct {
		name string
		opts []Opt
		want time.Duration
	}{
		{"defaults", nil, 10 * time.Second},
		{"short rebalance timeout", []Opt{RebalanceTimeout(4 * time.Second)}, 2 * time.Second},
		{"given", []Opt{RebalanceTimeout(4 * time.Second), DrainTimeout(3 * time.Second)}, 3 * time.Second},
	} {
		cfg := defaultCfg()
		for _, o := range append(base, c.opts...) {
			o.apply(&cfg)
		}
		if err := cfg.validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.drainTimeout != c.want {
			t.Errorf("%s: DrainTimeout %v, want %v", c.name, cfg.drainTimeout, c.want)
		}
	}
}

package system_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkafka"
	"github.com/ordercast/ordercast/ops"
	"github.com/ordercast/ordercast/system"
)

// TestReadyzFollowsBroker: /readyz turns 503, naming the brokers, when the
// broker stops answering although every member still counts as joined, and
// turns ready again when the broker is back.
func TestReadyzFollowsBroker(t *testing.T) {
	testkafka.SkipIfReal(t, "the broker going down is a kfake control")
	c, brokers := testkafka.Fake(t, nil)
	var down atomic.Bool
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if down.Load() {
			return nil, errors.New("injected: broker down"), true
		}
		return nil, nil, false
	})
	reg := srfake.New()
	t.Cleanup(reg.Close)
	sys, err := system.Start(context.Background(), system.Config{
		Brokers:     brokers,
		RegistryURL: reg.URL(),
		DSN:         "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db"),
		Services:    []string{system.ServiceOrders},
		HTTPAddr:    "127.0.0.1:0",
		Layout:      ops.Layout{Partitions: 2, ReplicationFactor: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	url := "http://" + sys.HTTPAddr() + "/readyz"
	waitReadyz := func(what string, ok func(int, string) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body := get(t, url)
			if ok(code, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz never %s; last %d %s", what, code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReadyz("ready", func(code int, _ string) bool { return code == http.StatusOK })
	down.Store(true)
	waitReadyz("503 naming the broker", func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.Contains(body, brokers[0]) && strings.Contains(body, "broker")
	})
	down.Store(false)
	waitReadyz("ready again", func(code int, _ string) bool { return code == http.StatusOK })
}

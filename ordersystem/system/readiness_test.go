package system_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/system"
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
	sys, err := startOn(t, brokers, system.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	url := "http://" + sys.AdminAddr() + "/readyz"
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

// TestReadyzSaysWhyBrokerIsUnreachable: with the broker gone (its port
// refusing connections), /readyz names the cause of the failed connection,
// not only that the probe's deadline passed.
func TestReadyzSaysWhyBrokerIsUnreachable(t *testing.T) {
	testkafka.SkipIfReal(t, "stops the broker")
	c, brokers := testkafka.Fake(t, nil)
	sys, err := startOn(t, brokers, system.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sys.Stop(ctx)
	})
	url := "http://" + sys.AdminAddr() + "/readyz"
	get := func() (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testkafka.WaitFor(t, 30*time.Second, "/readyz ready", func() bool { code, _ := get(); return code == http.StatusOK })
	c.Close()
	var body string
	testkafka.WaitFor(t, 30*time.Second, "/readyz 503 saying the connection was refused", func() bool {
		var code int
		code, body = get()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "connection refused")
	})
	if !strings.Contains(body, brokers[0]) {
		t.Errorf("/readyz does not name the broker %s: %s", brokers[0], body)
	}
	// The public listener's /readyz gives the verdict, not the reasons.
	resp, err := http.Get("http://" + sys.HTTPAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(b), brokers[0]) || strings.Contains(string(b), "refused") {
		t.Errorf("public /readyz: %d %q; want 503 without the broker's address or the error", resp.StatusCode, b)
	}
}

// The probe and metrics paths answer another method 405 with Allow, also
// when checkout (whose catch-all answers unknown paths 404) runs.
func TestProbePathsRefuseOtherMethods(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	sys, err := startOn(t, brokers, system.Config{
		Services: []string{system.ServiceCheckout},
		SeedFile: "../../data/online-retail/online_retail_2010-12-01.csv",
		Kafka:    system.KafkaConfig{Layout: ops.Layout{Partitions: 2, ReplicationFactor: 1}},
	}) // an embedded broker, whatever the environment
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	for _, url := range []string{"http://" + sys.HTTPAddr() + "/healthz", "http://" + sys.AdminAddr() + "/healthz", "http://" + sys.AdminAddr() + "/readyz", "http://" + sys.AdminAddr() + "/metrics"} {
		resp, err := http.Post(url, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST %s: %d, Allow %q; want 405 with Allow: GET, HEAD", url, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	resp, err := http.Get("http://" + sys.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %d", resp.StatusCode)
	}
}

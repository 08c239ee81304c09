package system_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/service"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// TestPublicListenerServesOnlyTheAPI: /metrics and /debug/pprof are on the
// admin listener only (404 on the public one, with and without checkout),
// the admin /readyz gives its reasons (JSON, the members) and the public one
// only the verdict; every public answer carries a request id.
func TestPublicListenerServesOnlyTheAPI(t *testing.T) {
	for _, services := range [][]string{{system.ServiceCheckout}, {system.ServiceOrders}} {
		t.Run(services[0], func(t *testing.T) {
			_, brokers := testkafka.Fake(t, nil)
			sys, err := startOn(t, brokers, system.Config{
				Services: services,
				SeedFile: "../../data/online-retail/online_retail_2010-12-01.csv",
				Kafka:    system.KafkaConfig{Layout: ops.Layout{Partitions: 2, ReplicationFactor: 1}},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sys.Stop(context.Background()) })
			if sys.AdminAddr() == "" || sys.AdminAddr() == sys.HTTPAddr() {
				t.Fatalf("admin address %q, public %q: want two listeners", sys.AdminAddr(), sys.HTTPAddr())
			}
			if host, _, _ := net.SplitHostPort(sys.AdminAddr()); !net.ParseIP(host).IsLoopback() {
				t.Errorf("admin listener on %s by default; want loopback", sys.AdminAddr())
			}
			public, admin := "http://"+sys.HTTPAddr(), "http://"+sys.AdminAddr()
			for _, c := range []struct {
				url  string
				want int
			}{
				{public + "/metrics", http.StatusNotFound},
				{public + "/debug/pprof/", http.StatusNotFound},
				{public + "/healthz", http.StatusOK},
				{admin + "/metrics", http.StatusOK},
				{admin + "/debug/pprof/", http.StatusOK},
				{admin + "/healthz", http.StatusOK},
				{public + "/console/", http.StatusNotFound},
				{admin + "/console/", http.StatusOK},
			} {
				if code, body := get(t, c.url); code != c.want {
					t.Errorf("GET %s: %d; want %d (%.200s)", c.url, code, c.want, body)
				}
			}
			if services[0] == system.ServiceCheckout {
				if code, _ := get(t, public+"/openapi.json"); code != http.StatusOK {
					t.Errorf("public /openapi.json: %d; want 200", code)
				}
			}
			testkafka.WaitFor(t, 30*time.Second, "admin /readyz ready", func() bool { code, _ := get(t, admin+"/readyz"); return code == http.StatusOK })
			if _, body := get(t, admin+"/readyz"); !strings.Contains(body, `"members"`) {
				t.Errorf("admin /readyz without its reasons: %s", body)
			}
			code, body := get(t, public+"/readyz")
			if code != http.StatusOK || strings.Contains(body, "members") || strings.Contains(body, brokers[0]) {
				t.Errorf("public /readyz: %d %q; want 200 and no members nor brokers", code, body)
			}
			resp, err := http.Get(public + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if id := resp.Header.Get(service.HeaderRequestID); !strings.HasPrefix(id, "req_") {
				t.Errorf("public answer's %s %q; want a request id", service.HeaderRequestID, id)
			}
		})
	}
}

// TestPublicListenerConnectionCap: with MaxHTTPConns connections held open
// by clients that send nothing, one more is not served until one of them
// closes; then it is. Without a cap every connection is served at once.
func TestPublicListenerConnectionCap(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	const maxConns = 8
	sys, err := startOn(t, brokers, system.Config{
		HTTP: system.HTTPConfig{MaxConns: maxConns},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for range maxConns {
		c, err := net.Dial("tcp", sys.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Each held connection is accepted once it is served: make sure the
	// server took all of them before the one over the cap.
	extra, err := net.Dial("tcp", sys.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if _, err := extra.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	answered := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(extra).ReadString('\n')
		answered <- line
	}()
	select {
	case line := <-answered:
		t.Fatalf("connection %d over a cap of %d answered at once: %q", maxConns+1, maxConns, line)
	case <-time.After(time.Second):
	}
	held[0].Close()
	select {
	case line := <-answered:
		if !strings.Contains(line, "200") {
			t.Errorf("answer once a connection closed: %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection over the cap was not served once another closed")
	}
}

// TestDatabaseDownAnswerNamesNoInternals: with checkout's database gone, a
// POST /orders is answered 503 database_unavailable with the request id of
// its header in the body and none of the database error's text.
func TestDatabaseDownAnswerNamesNoInternals(t *testing.T) {
	_, brokers := testkafka.Fake(t, nil)
	sys, err := startOn(t, brokers, system.Config{
		Services: []string{system.ServiceCheckout},
		SeedFile: "../../data/online-retail/online_retail_2010-12-01.csv",
		Kafka:    system.KafkaConfig{Layout: ops.Layout{Partitions: 2, ReplicationFactor: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	if err := sys.DB.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+sys.HTTPAddr()+"/orders", "application/json", strings.NewReader(`{"lines":[{"stockCode":"85123A","quantity":6}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	id := resp.Header.Get(service.HeaderRequestID)
	if resp.StatusCode < 500 || id == "" || !strings.Contains(b.String(), id) {
		t.Fatalf("%d, request id %q: %s; want a 5xx naming its request id", resp.StatusCode, id, b.String())
	}
	if strings.Contains(b.String(), "sql") || strings.Contains(b.String(), "closed") {
		t.Errorf("the body names the database error: %s", b.String())
	}
}

package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ordercast/ordercast/internal/testkit/testkafka"
	"github.com/ordercast/ordercast/ordersystem/ops"
	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/ordersystem/system"
)

// EnvScreenshots names the directory the browser test writes its
// screenshots to (docs/img to refresh the README's); unset, a temporary one.
const EnvScreenshots = "ORDERCAST_SCREENSHOTS"

// chromium returns the path of a Chromium or Chrome binary, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestConsoleInBrowser drives the console of a running order system in
// headless Chromium: the overview shows the orders group's lag reach 0 and
// its DLQ holding the poison record; without an operator session the DLQ
// page offers no replay; after logging in with the token, the record is
// replayed through the page and shown as replayed.
func TestConsoleInBrowser(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("chromium not found: install it (Debian: apt-get install -y chromium) to run the browser test")
	}
	testkafka.Parallel(t)
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	brokers := testkafka.Cluster(t, nil)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	sys, err := system.Start(context.Background(), system.Config{
		Services: []string{system.ServiceOrders, system.ServicePayments, system.ServiceNotifications},
		Kafka: system.KafkaConfig{Brokers: brokers,
			Layout: ops.Layout{Partitions: 2, ReplicationFactor: testkafka.ReplicationFactor(t), RetryDelays: []time.Duration{time.Second}}},
		Schema: system.SchemaConfig{RegistryURL: reg.URL()},
		DB:     system.DBConfig{DSN: "sqlite:" + filepath.Join(t.TempDir(), "ordercast.db")},
		HTTP:   system.HTTPConfig{Addr: "127.0.0.1:0", ConsoleToken: testToken},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Stop(context.Background()) })
	// The poison record: not the wire format, straight to each group's DLQ.
	testkafka.Produce(t, brokers, &kgo.Record{Topic: order.TopicOrderCreated, Key: []byte("17850"), Value: []byte(`<script>alert("poison")</script>`)})
	base := "http://" + sys.AdminAddr() + "/console"

	actx, cancelA := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 1000))...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	start := time.Now()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			html, _ := chromedp.Run(hctx, chromedp.OuterHTML(chromedp.CSS(`main`)))
			t.Fatalf("%s after %v: %v\n%s", what, time.Since(start), err, html)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}

	// The overview, reloaded until the orders group has read everything
	// and dead-lettered the poison record.
	const row = `#groups tr[data-group="orders"]`
	deadline := time.Now().Add(30 * time.Second)
	for {
		do("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#groups`)))
		if count(row+` a.dlq-count`) == 1 && text(row+` td.lag`) == "0" && text(row+` a.dlq-count`) == "1" {
			break
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS(`#groups`)))
			t.Fatalf("the orders group's lag did not reach 0 with one DLQ record within 30s:\n%s", html)
		}
		do("wait", chromedp.Sleep(300*time.Millisecond)) // between reloads of the page: a poll
	}
	shot("console-overview.png")

	// Without an operator session: no replay offered.
	do("dlq", chromedp.Navigate(base+"/dlq/orders"), chromedp.WaitVisible(chromedp.CSS(`#records`)))
	if n := count(`#replay, input[name="id"]`); n != 0 {
		t.Fatalf("the DLQ page offers replay without an operator session (%d controls)", n)
	}
	if s := text(`#records tr[data-id] td.replay-state`); s != "-" {
		t.Fatalf("replay state before the replay: %q", s)
	}
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`#records tr[data-id]`), "data-id"))
	if err != nil {
		t.Fatal(err)
	}
	id := attr.Value

	// The record page shows the payload as text.
	do("record", chromedp.Click(chromedp.CSS(`#records tr[data-id] a`)), chromedp.WaitVisible(chromedp.CSS(`#headers`)))
	if s := text(`#payload`); s != `<script>alert("poison")</script>` {
		t.Errorf("record page payload %q; want the poison value as text", s)
	}
	shot("console-record.png")

	// Log in with the token (the form sends back to the DLQ page), select
	// the record and replay it.
	do("login page", chromedp.Navigate(base+"/dlq/orders"), chromedp.WaitVisible(chromedp.CSS(`#login`)))
	do("login keys", chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), testToken))
	do("login click", chromedp.Click(chromedp.CSS(`#login`)))
	do("login wait", chromedp.WaitVisible(chromedp.CSS(`#replay`)))
	do("replay", chromedp.Click(chromedp.CSS(`#records tr[data-id="`+id+`"] input[name="id"]`)), chromedp.Click(chromedp.CSS(`#replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#replay-result`)))
	if s := text(`#replay-result p`); !strings.HasPrefix(s, "1 replayed") {
		t.Fatalf("replay result %q; want 1 replayed", s)
	}
	if s := text(`#records tr[data-id="` + id + `"] td.replay-state`); !strings.HasPrefix(s, "replayed") {
		t.Fatalf("the replayed record's state %q; want replayed", s)
	}
	shot("console-dlq.png")

	do("group", chromedp.Navigate(base+"/groups/orders"), chromedp.WaitVisible(chromedp.CSS(`#partitions`)))
	shot("console-group.png")
	do("topic", chromedp.Navigate(base+"/topics/orderCreated"), chromedp.WaitVisible(chromedp.CSS(`#readers`)))
	shot("console-topic.png")
	t.Logf("screenshots in %s", shots)
}

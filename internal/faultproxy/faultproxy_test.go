package faultproxy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/faultproxy"
	"github.com/ordercast/ordercast/internal/testkit/testkafka"
)

// The proxy's tests run on the embedded kfake broker, and on the real
// cluster named by ORDERCAST_TEST_BROKERS (testkafka.Cluster).

func setup(t *testing.T) (*faultproxy.Proxy, []string) {
	t.Helper()
	addrs := testkafka.Cluster(t, map[string]int32{"t": 1})
	if testkafka.Real() {
		// A topic just recreated under the same name is refused by the
		// group coordinator (UNKNOWN_TOPIC_OR_PARTITION) for a moment.
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		testkafka.WaitFor(t, 20*time.Second, "the coordinator to accept commits for t", func() bool {
			return commit(context.Background(), cl, 0) == nil
		})
	}
	p := faultproxy.New()
	t.Cleanup(p.Close)
	return p, addrs
}

// client returns a client routed through p, with a short request timeout so
// faults surface quickly.
func client(t *testing.T, p *faultproxy.Proxy, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	o := append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.Dialer(p.DialContext),
		kgo.RequestTimeoutOverhead(500 * time.Millisecond), kgo.RetryTimeout(20 * time.Second),
		kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)
	cl, err := kgo.NewClient(o...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func commit(ctx context.Context, cl *kgo.Client, at int64) error {
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: at, LeaderEpoch: -1})
	resp, err := kadm.NewClient(cl).CommitOffsets(ctx, "g", offs)
	if err == nil {
		err = resp.Error()
	}
	return err
}

func committedAt(t *testing.T, addrs []string) int64 {
	t.Helper()
	c, ok := testkafka.Committed(t, addrs, "g", "t")[0]
	if !ok {
		return -1
	}
	return c
}

func wait(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Every connection of the client, to the seed and to the broker address
// learned from metadata, goes through the proxy.
func TestRouting(t *testing.T) {
	p, addrs := setup(t)
	cl := client(t, p, addrs)
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if n := p.Seen(int16(kmsg.Produce)); n != 1 {
		t.Errorf("proxy saw %d produce requests, want 1", n)
	}
	if p.Seen(int16(kmsg.Metadata)) == 0 || p.Seen(int16(kmsg.ApiVersions)) == 0 {
		t.Errorf("proxy saw no metadata or api-versions requests: %v", p.SeenAll())
	}
	if ups := p.Upstreams(); len(ups) != 1 || ups[0] != addrs[0] {
		t.Errorf("upstreams %v, want exactly the broker %s", ups, addrs[0])
	}
}

// An OffsetCommit held past the client's request timeout is applied by the
// broker after a later commit: the stale commit that lands late (scenario S15 in
// docs/scenarios.md). The client has closed the held request's connection by then.
func TestHoldRequestLandsAfterLaterCommit(t *testing.T) {
	p, addrs := setup(t)
	cl := client(t, p, addrs)
	ctx := context.Background()
	held := p.HoldRequest(faultproxy.Keys(int16(kmsg.OffsetCommit)), 3*time.Second)
	// Times out after 500ms; the client retries on a new connection.
	err := commit(ctx, cl, 5)
	select {
	case <-held.Done():
		t.Fatal("the held commit was delivered before the client's first commit returned")
	default:
	}
	if err != nil {
		t.Logf("commit 5 (held): %v", err)
	}
	if n := p.Seen(int16(kmsg.OffsetCommit)); err == nil && n < 2 {
		t.Fatalf("commit 5 succeeded after %d OffsetCommit requests: not through a retry", n)
	}
	if err := commit(ctx, cl, 10); err != nil {
		t.Fatal(err)
	}
	if got := committedAt(t, addrs); got != 10 {
		t.Fatalf("committed %d after the second commit, want 10", got)
	}
	wait(t, held.Done(), 10*time.Second, "the held commit to be delivered")
	if !held.ClientLeft() {
		t.Error("the client had not closed the held request's connection when it was delivered")
	}
	testkafka.WaitFor(t, 10*time.Second, "the held commit to be applied", func() bool { return committedAt(t, addrs) == 5 })
	if r := held.Request(); r.APIKey != int16(kmsg.OffsetCommit) || r.Upstream != addrs[0] {
		t.Errorf("held %+v", r)
	}
}

// A dropped response: the broker applied the commit, the client never saw
// the answer, timed out and retried on a new connection.
func TestDropResponseRetries(t *testing.T) {
	p, addrs := setup(t)
	cl := client(t, p, addrs)
	ctx := context.Background()
	if err := commit(ctx, cl, 1); err != nil { // connect first
		t.Fatal(err)
	}
	drop := p.DropResponse(faultproxy.Keys(int16(kmsg.OffsetCommit)))
	before := p.Seen(int16(kmsg.OffsetCommit))
	if err := commit(ctx, cl, 7); err != nil {
		t.Fatalf("commit after a dropped response: %v (the client should have retried)", err)
	}
	wait(t, drop.Done(), time.Second, "the response to be dropped")
	if n := p.Seen(int16(kmsg.OffsetCommit)) - before; n < 2 {
		t.Errorf("%d OffsetCommit requests for one commit, want a retry", n)
	}
	if got := committedAt(t, addrs); got != 7 {
		t.Errorf("committed %d, want 7", got)
	}
}

// Reset sends RST on every open connection once; the client reconnects and
// later connections are untouched.
func TestResetReconnects(t *testing.T) {
	p, addrs := setup(t)
	cl := client(t, p, addrs)
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("a")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	open := p.Conns()
	if n := p.Reset(""); n != open || n == 0 {
		t.Fatalf("reset %d connections, %d were open", n, open)
	}
	testkafka.WaitFor(t, 5*time.Second, "reset connections to be gone", func() bool { return p.Conns() < open })
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatalf("produce after reset: %v", err)
	}
	if p.Conns() == 0 {
		t.Error("no connection after the client reconnected")
	}
	if p.Resets() != int64(open) {
		t.Errorf("Resets %d, want %d", p.Resets(), open)
	}
}

// Withheld responses: requests reach the broker, nothing comes back, on open
// and new connections alike, until release.
func TestWithhold(t *testing.T) {
	p, addrs := setup(t)
	cl := client(t, p, addrs)
	ctx := context.Background()
	if err := commit(ctx, cl, 1); err != nil {
		t.Fatal(err)
	}
	release := p.Withhold(addrs[0], 0)
	if !p.Withheld(addrs[0]) || !p.Withheld("") {
		t.Fatal("Withheld reports false")
	}
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	err := commit(short, cl, 2)
	cancel()
	if err == nil {
		t.Fatal("a commit succeeded while responses were withheld")
	}
	// The requests were applied all the same.
	if got := committedAt(t, addrs); got != 2 {
		t.Errorf("committed %d while withheld, want 2 (the broker applies the request)", got)
	}
	fresh := client(t, p, addrs)
	short, cancel = context.WithTimeout(ctx, 1500*time.Millisecond)
	err = fresh.Ping(short)
	cancel()
	if err == nil {
		t.Fatal("a new connection got an answer while responses were withheld")
	}
	release()
	if p.Withheld(addrs[0]) {
		t.Fatal("still withheld after release")
	}
	if err := commit(ctx, cl, 3); err != nil {
		t.Fatalf("commit after release: %v", err)
	}
	if err := fresh.Ping(ctx); err != nil {
		t.Fatalf("ping after release: %v", err)
	}
}

// A timed withholding ends by itself.
func TestWithholdFor(t *testing.T) {
	p, addrs := setup(t)
	cl := client(t, p, addrs, kgo.RequestTimeoutOverhead(5*time.Second))
	ctx := context.Background()
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.Withhold("", time.Second)
	if err := commit(ctx, cl, 4); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("commit answered after %v, within the 1s withholding", d)
	}
}

// Latency delays each direction: a round trip takes at least twice it.
func TestLatency(t *testing.T) {
	p, addrs := setup(t)
	cl := client(t, p, addrs, kgo.RequestTimeoutOverhead(5*time.Second))
	ctx := context.Background()
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	p.SetLatency(addrs[0], 200*time.Millisecond)
	start := time.Now()
	if err := commit(ctx, cl, 1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("commit took %v with 200ms each way", d)
	}
	p.SetLatency(addrs[0], 0)
	p.SetLatency("", 0)
	start = time.Now()
	if err := commit(ctx, cl, 2); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= 400*time.Millisecond {
		t.Logf("commit took %v without latency (slow machine?)", d)
	}
}

// Close ends everything: dials fail afterwards.
func TestClose(t *testing.T) {
	p, addrs := setup(t)
	cl := client(t, p, addrs)
	if err := cl.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if p.Conns() != 0 {
		t.Errorf("%d connections open after Close", p.Conns())
	}
	if _, err := p.DialContext(context.Background(), "tcp", addrs[0]); err == nil {
		t.Error("dial after Close succeeded")
	} else if errors.Is(err, context.Canceled) {
		t.Error(err)
	}
}

// TestListenFixedAddress: a listener on a fixed address forwards to its
// upstream, and the upstream's faults apply to it (Reset closes what is open).
func TestListenFixedAddress(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c) }() // echo whole frames back
		}
	}()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	p := faultproxy.New()
	defer p.Close()
	if err := p.Listen(addr, up.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := p.Listen(addr, up.Addr().String()); err == nil {
		t.Fatal("a second listener for one upstream: want an error")
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A request frame: size, api key 18, version 0, correlation id 7.
	req := []byte{0, 0, 0, 8, 0, 18, 0, 0, 0, 0, 0, 7}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(req))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, req) {
		t.Fatalf("echo through the fixed listener: %v %v", got, err)
	}
	if n := p.Reset(up.Addr().String()); n != 1 {
		t.Fatalf("Reset of the upstream reset %d connections, want 1", n)
	}
	if _, err := io.ReadFull(c, got[:1]); err == nil {
		t.Fatal("read after Reset: want an error")
	}
}

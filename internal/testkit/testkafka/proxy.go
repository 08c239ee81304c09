package testkafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ordercast/ordercast/internal/faultproxy"
)

// Proxy starts a network fault proxy (package faultproxy) for this test,
// closed when the test ends, and returns it with the option that routes a
// client's every connection through it (kgo.Dialer(p.DialContext)): pass the
// option to every client whose network the test breaks, e.g.
// processor.ClientOpts(dial). It works on kfake and a real cluster alike;
// the brokers need not advertise the proxy.
func Proxy(t testing.TB) (*faultproxy.Proxy, kgo.Opt) {
	t.Helper()
	p := faultproxy.New()
	t.Cleanup(p.Close)
	return p, kgo.Dialer(p.DialContext)
}

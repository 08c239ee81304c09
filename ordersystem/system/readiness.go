package system

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ordercast/ordercast/internal/brokererr"
)

// brokerProbeEvery is how long one broker probe's answer is reused: /readyz
// sends at most one request to the broker per interval however often it is
// polled.
const brokerProbeEvery = 2 * time.Second

// brokerProbeTimeout bounds one probe.
const brokerProbeTimeout = 2 * time.Second

// brokerProbe asks the broker, through the admin client, for its metadata
// (a MetadataRequest without topics, not answered from the client's
// metadata cache) and remembers the answer for brokerProbeEvery. Safe for
// concurrent use; concurrent callers share one request.
type brokerProbe struct {
	cl      *kgo.Client
	brokers []string

	mu   sync.Mutex
	at   time.Time
	last error

	dialMu  sync.Mutex
	dialErr error // the last failed connection to a broker, nil after a success
}

// OnBrokerConnect implements kgo.HookBrokerConnect: it keeps the last dial
// error, so that a failed probe says why ("connection refused") rather than
// only that its deadline passed.
func (p *brokerProbe) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	p.dialMu.Lock()
	p.dialErr = err
	p.dialMu.Unlock()
}

// startWait bounds how long a start check waits out a transient broker
// error (brokererr.Transient) before the start fails with it.
const startWait = 30 * time.Second

// retryTransient runs check until it returns nil or an error that is not
// transient, for at most startWait (brokererr.Retry's backoff), logging each
// failed attempt at WARN (what names the check). It returns check's last
// error, or nil. Found by the crash harness on a 3-node cluster: services
// started while a broker was restarting stopped at once ("broker closed the
// connection immediately"), and were restarted over a thousand times in one
// run.
func retryTransient(ctx context.Context, log *slog.Logger, what string, check func() error) error {
	return brokererr.Retry(ctx, startWait, brokererr.Transient, func(attempt int, wait time.Duration, err error) {
		log.Warn("start: Kafka not answering yet; trying again", "check", what, "attempt", attempt, "in", wait, "error", err)
	}, check)
}

// checkNow is check without the reuse of a recent answer.
func (p *brokerProbe) checkNow(ctx context.Context) error {
	p.mu.Lock()
	p.at = time.Time{}
	p.mu.Unlock()
	return p.check(ctx)
}

// check returns nil when the broker answered within brokerProbeTimeout in
// the last brokerProbeEvery, else an error naming the brokers.
func (p *brokerProbe) check(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < brokerProbeEvery {
		return p.last
	}
	pctx, cancel := context.WithTimeout(ctx, brokerProbeTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	_, err := req.RequestWith(pctx, p.cl)
	if err != nil {
		p.dialMu.Lock()
		dialErr := p.dialErr
		p.dialMu.Unlock()
		if dialErr != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (last connection attempt: %v)", err, dialErr)
		}
		err = fmt.Errorf("broker unreachable (--brokers %s): %w", strings.Join(p.brokers, ","), err)
	}
	p.at, p.last = time.Now(), err
	return err
}

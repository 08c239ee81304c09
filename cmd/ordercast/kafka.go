package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// defaultBrokers is the embedded broker of `ordercast up`.
const defaultBrokers = "127.0.0.1:9092"

// defaultRegistry is the embedded schema registry of `ordercast up`.
const defaultRegistry = "http://127.0.0.1:8081"

// opsFlags are the flags of the operator commands (topics, groups, dlq).
type opsFlags struct {
	brokers string
	output  string
	timeout time.Duration
	sec     security
}

// register adds the flags to cmd and its subcommands; withRegistry adds
// --registry-tls-ca too, for commands that decode payloads.
func (o *opsFlags) register(cmd *cobra.Command, withRegistry bool) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.brokers, "brokers", envOr("KAFKA_BROKERS", defaultBrokers), "Kafka bootstrap servers, comma separated (env KAFKA_BROKERS; default: the embedded broker of 'ordercast up')")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table (for people) or json (for scripts)")
	f.DurationVar(&o.timeout, "timeout", 60*time.Second, "give up after this long")
	o.sec.register(f, withRegistry)
}

// opsConn is one operator command's connection to the cluster: a context
// bounded by --timeout and a client whose broker answered.
type opsConn struct {
	ctx    context.Context
	cancel context.CancelFunc
	cl     *kgo.Client
	adm    *kadm.Client
	opts   []kgo.Opt // the client's options (--brokers, TLS, SASL), for clients of its own
}

// Close closes the client and releases the context.
func (c *opsConn) Close() {
	c.cl.Close()
	c.cancel()
}

// dial validates the common flags (--output, --timeout) and connects: the
// set-up every operator command starts with. The caller closes the result.
func (o *opsFlags) dial(cmd *cobra.Command) (*opsConn, error) {
	if o.output != "table" && o.output != "json" {
		return nil, fmt.Errorf("--output %q: want table or json", o.output)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %v: want a positive duration such as 30s", o.timeout)
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	// SIGINT/SIGTERM cancel the command's context, so that what it was
	// doing ends cleanly: a dlq replay or purge aborts its open transaction
	// (which would otherwise hold back every read_committed consumer of the
	// topic until the transaction timeout) and reports how far it got.
	sigCtx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancelTimeout := context.WithTimeout(sigCtx, o.timeout)
	cancel := func() { cancelTimeout(); stop() }
	cl, adm, opts, err := o.connect(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &opsConn{ctx: ctx, cancel: cancel, cl: cl, adm: adm, opts: opts}, nil
}

// kafkaOpts returns the client options for --brokers and the TLS and SASL
// flags.
func (o *opsFlags) kafkaOpts() ([]kgo.Opt, error) {
	seeds := splitList(o.brokers)
	if len(seeds) == 0 {
		return nil, fmt.Errorf("--brokers is empty: give the Kafka bootstrap servers, e.g. %s (the embedded broker of `ordercast up`)", defaultBrokers)
	}
	sec, err := o.sec.kafkaOpts()
	if err != nil {
		return nil, err
	}
	return append(sec, kgo.SeedBrokers(seeds...), kgo.ClientID("ordercast-ops")), nil
}

// dialErrors remembers the last failed connection, to say why a broker is
// unreachable instead of only "context deadline exceeded".
type dialErrors struct {
	mu   sync.Mutex
	last error
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (d *dialErrors) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		d.mu.Lock()
		d.last = err
		d.mu.Unlock()
	}
}

func (d *dialErrors) get() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// connect returns an admin client after checking, within 10s (or --timeout
// if shorter), that a broker answers. The error names the addresses tried
// and the flag that changes them.
func (o *opsFlags) connect(ctx context.Context) (*kgo.Client, *kadm.Client, []kgo.Opt, error) {
	opts, err := o.kafkaOpts()
	if err != nil {
		return nil, nil, nil, err
	}
	hook := &dialErrors{}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...), kgo.WithHooks(hook))...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--brokers %q: %w", o.brokers, err)
	}
	adm := kadm.NewClient(cl)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := adm.BrokerMetadata(pctx); err != nil {
		cl.Close()
		if derr := hook.get(); derr != nil {
			err = derr
		}
		return nil, nil, nil, fmt.Errorf("cannot reach a Kafka broker at %s (%v): start the embedded one with `ordercast up`, or point --brokers (or KAFKA_BROKERS) at your cluster", o.brokers, err)
	}
	return cl, adm, opts, nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

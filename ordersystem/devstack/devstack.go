// Package devstack is the embedded default that `ordercast up` starts with
// nothing installed: a Kafka-protocol broker (franz-go kfake) persisting to
// the data directory, a Confluent-compatible schema registry (franz-go
// srfake) whose subjects are saved to the data directory on shutdown and
// restored on start, and the SQLite database file path.
//
// Layout of the data directory (default ./.ordercast):
//
//	kafka/           kfake's topics, records, committed offsets, producer state
//	registry.json    the registry's schemas (subject, version, id, text)
//	ordercast.db     SQLite (WAL) for orders, wallets, inbox/outbox, notifications
package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"golang.org/x/net/netutil"
)

// Config configures the embedded stack.
type Config struct {
	// DataDir is the directory for all state. Default "./.ordercast".
	DataDir string
	// BrokerAddr is the broker's listen address. Default "127.0.0.1:9092";
	// port 0 picks a free port.
	BrokerAddr string
	// RegistryAddr is the registry's listen address. Default
	// "127.0.0.1:8081"; port 0 picks a free port.
	RegistryAddr string
	// Logger receives lifecycle messages. Default: discard.
	Logger *slog.Logger
	// AllowRemote lets BrokerAddr and RegistryAddr be addresses other than
	// loopback ones (the --allow-remote-embedded flag). The embedded broker
	// and registry take any client without credentials, so on a reachable
	// address anyone on the network may write any topic (a forged
	// paymentProcessed) or change the registry; Start refuses such an
	// address unless AllowRemote is set, and then logs a warning. Default
	// false: loopback only.
	AllowRemote bool
	// MaxConns caps the connections the broker and the registry each
	// accept at once; one more waits in the listen backlog until one
	// closes. Default (0) DefaultMaxConns.
	MaxConns int
}

// Stack is a running embedded broker and registry.
type Stack struct {
	cfg         Config
	Cluster     *kfake.Cluster
	Brokers     []string
	Registry    *srfake.Registry
	RegistryURL string
	// DSN is the SQLite data source for store.Open.
	DSN  string
	srv  *http.Server
	ln   net.Listener
	lock *os.File
	// Unclean reports that the previous stack on this data directory did
	// not stop through Close (SIGKILL, OOM, power loss). Its broker's
	// transactions may then be partially committed: kfake writes a
	// transaction's commit markers partition by partition with no prepare
	// record, so a kill in the middle commits some partitions and aborts
	// the others. Exactly-once results across such a crash are not assured
	// on the embedded broker (they are on Kafka).
	Unclean bool
}

// runningFile exists in a data directory while a stack runs on it; Close
// removes it, so finding it at Start means the last stack did not stop
// cleanly.
const runningFile = "RUNNING"

// lockDataDir takes an exclusive advisory lock (flock) on <dir>/LOCK, so two
// processes never run a broker on one data directory: the last to stop would
// overwrite the other's log. The lock ends with the process, even on SIGKILL.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devstack: lock data directory %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("devstack: data directory %s is in use by another `ordercast up` or `ordercast devstack` (stop it, or choose another --data-dir): %w", dir, err)
	}
	return f, nil
}

// Start starts the broker and the registry. It fails if an address is not
// a loopback one without Config.AllowRemote, if the data directory cannot
// be created or is writable by group or others (PrepareDataDir), if a port
// is taken (the error names the address and the flag to change it), or if
// the persisted state cannot be read. A start that fails leaves the data
// directory's RUNNING marker as it found it, so the next start reports
// Unclean only for a stack that did not stop through Close.
func Start(cfg Config) (*Stack, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = ".ordercast"
	}
	if cfg.BrokerAddr == "" {
		cfg.BrokerAddr = "127.0.0.1:9092"
	}
	if cfg.RegistryAddr == "" {
		cfg.RegistryAddr = "127.0.0.1:8081"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if err := checkAddrs(cfg); err != nil {
		return nil, err
	}
	if err := PrepareDataDir(cfg.DataDir, cfg.Logger); err != nil {
		return nil, err
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			lock.Close()
		}
	}()
	// The listeners first: a port that is taken fails the start before
	// the RUNNING marker is written, so it is not taken next time for a
	// stack that was killed.
	bln, err := net.Listen("tcp", cfg.BrokerAddr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("devstack: broker address %s is not free (is another `ordercast up` or a Kafka broker running? choose another with --broker-addr): %w", cfg.BrokerAddr, err)
		}
		return nil, fmt.Errorf("devstack: broker address %s (--broker-addr): cannot listen there: %w", cfg.BrokerAddr, err)
	}
	rln, err := net.Listen("tcp", cfg.RegistryAddr)
	if err != nil {
		bln.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("devstack: registry address %s is not free (choose another with --registry-addr): %w", cfg.RegistryAddr, err)
		}
		return nil, fmt.Errorf("devstack: registry address %s (--registry-addr): cannot listen there: %w", cfg.RegistryAddr, err)
	}
	var cluster *kfake.Cluster
	running := filepath.Join(cfg.DataDir, runningFile)
	_, statErr := os.Stat(running)
	unclean := statErr == nil
	defer func() {
		if started {
			return
		}
		if cluster != nil {
			cluster.Close()
		}
		bln.Close()
		rln.Close()
		// A start that failed leaves the marker as it found it: a
		// marker of a stack that was killed stays for the next start.
		if !unclean {
			_ = os.Remove(running)
		}
	}()
	if err := os.WriteFile(running, []byte(fmt.Sprintf("pid %d\n", os.Getpid())), 0o600); err != nil {
		return nil, fmt.Errorf("devstack: data directory %s: %w", cfg.DataDir, err)
	}
	cluster, err = kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.ListenFn(func(network, address string) (net.Listener, error) { return guardBroker(bln, cfg.MaxConns), nil }),
		kfake.DataDir(filepath.Join(cfg.DataDir, "kafka")),
		kfake.DefaultNumPartitions(6),
		kfake.ClusterID("ordercast-embedded"),
		// Apache Kafka's default group.max.session.timeout.ms (kfake's own
		// is 5m), so --session-timeout means the same on both brokers.
		kfake.GroupMaxSessionTimeout(30*time.Minute),
	)
	if err != nil {
		cluster = nil // nothing to close but the listeners
		return nil, fmt.Errorf("devstack: start embedded broker: %w", err)
	}
	s := &Stack{cfg: cfg, lock: lock, Unclean: unclean, Cluster: cluster, Brokers: cluster.ListenAddrs(), DSN: "sqlite:" + filepath.Join(cfg.DataDir, "ordercast.db")}
	s.Registry = srfake.NewRegistry()
	if err := s.restoreRegistry(); err != nil {
		return nil, err
	}
	s.ln = rln
	s.RegistryURL = "http://" + rln.Addr().String()
	s.srv = &http.Server{Handler: guardRegistry(s.Registry.Handler()), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: registryReadTimeout, WriteTimeout: registryWriteTimeout, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() { _ = s.srv.Serve(netutil.LimitListener(rln, cfg.MaxConns)) }()
	cfg.Logger.Info("embedded stack started", "brokers", s.Brokers, "registry", s.RegistryURL, "data_dir", cfg.DataDir)
	started = true
	return s, nil
}

type savedSchema struct {
	Subject string    `json:"subject"`
	Version int       `json:"version"`
	ID      int       `json:"id"`
	Schema  sr.Schema `json:"schema"`
}

func (s *Stack) registryFile() string { return filepath.Join(s.cfg.DataDir, "registry.json") }

func (s *Stack) restoreRegistry() error {
	b, err := os.ReadFile(s.registryFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("devstack: read %s: %w", s.registryFile(), err)
	}
	var saved []savedSchema
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("devstack: %s is corrupt (delete it to start the registry empty): %w", s.registryFile(), err)
	}
	// Referenced schemas first: seed in id order.
	sort.Slice(saved, func(i, j int) bool { return saved[i].ID < saved[j].ID })
	for _, x := range saved {
		if err := seed(s.Registry, x); err != nil {
			return fmt.Errorf("devstack: restore schema %s v%d (id %d): %w", x.Subject, x.Version, x.ID, err)
		}
	}
	return nil
}

func seed(r *srfake.Registry, x savedSchema) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	r.SeedSchema(x.Subject, x.Version, x.ID, x.Schema)
	return nil
}

// SaveRegistry writes the registry's schemas to the data directory, so the
// same ids resolve after a restart (records on the topics carry them).
func (s *Stack) SaveRegistry(ctx context.Context) error {
	cl, err := sr.NewClient(sr.URLs(s.RegistryURL))
	if err != nil {
		return err
	}
	all, err := cl.AllSchemas(ctx)
	if err != nil {
		return fmt.Errorf("devstack: list registry schemas: %w", err)
	}
	saved := make([]savedSchema, 0, len(all))
	for _, x := range all {
		saved = append(saved, savedSchema{Subject: x.Subject, Version: x.Version, ID: x.ID, Schema: x.Schema})
	}
	b, err := json.MarshalIndent(saved, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.registryFile() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("devstack: save registry: %w", err)
	}
	return os.Rename(tmp, s.registryFile())
}

// Close saves the registry, stops serving it and closes the broker, which
// flushes its data directory. Safe to call once.
func (s *Stack) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.SaveRegistry(ctx); err != nil {
		s.cfg.Logger.Error("saving registry failed", "error", err)
	}
	_ = s.srv.Shutdown(ctx)
	s.Cluster.Close()
	_ = os.Remove(filepath.Join(s.cfg.DataDir, runningFile))
	s.lock.Close() // releases the flock
	s.cfg.Logger.Info("embedded stack stopped")
}

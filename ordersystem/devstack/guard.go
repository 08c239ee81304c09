package devstack

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"golang.org/x/net/netutil"
)

// DefaultMaxConns is Config.MaxConns by default: the connections the broker
// and the registry each accept at once. A process of the order system opens
// one or two connections per Kafka client (one client per group member, the
// producer, the admin client), so even `up --instances` of 64 per group
// stays well under it; a client that opens connections without end holds
// the others back instead of exhausting the process's file descriptors.
const DefaultMaxConns = 512

// registryReadTimeout and registryWriteTimeout bound one request to the
// embedded registry (http.Server ReadTimeout, WriteTimeout): its requests
// and answers are a few kilobytes, so a client that sends or reads slower
// than that holds a connection for 30 s at most.
const (
	registryReadTimeout  = 30 * time.Second
	registryWriteTimeout = 30 * time.Second
)

// brokerWriteTimeout bounds each write of an answer to a broker
// connection: a client that stops reading its answers (a fetch of many
// megabytes) has its connection closed after this long instead of holding
// the broker's goroutine and buffers for ever.
const brokerWriteTimeout = 30 * time.Second

// Loopback reports whether a listen address (host:port) is on the loopback
// interface only: a loopback IP (127.0.0.0/8, ::1), or a name that resolves
// only to them ("localhost"). An empty host (":9092", every interface) is
// not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// ErrRemoteAddr is returned (wrapped, naming the address and its flag) by
// Start and CheckAddr for a broker or registry address that is not a
// loopback one, without Config.AllowRemote.
var ErrRemoteAddr = errors.New("the embedded broker and registry take any client without credentials")

// CheckAddr returns nil for a loopback address, else an error naming flag
// and what to do (ErrRemoteAddr) unless allowRemote. The CLI runs it before
// anything starts; Start runs it too.
func CheckAddr(flag, addr string, allowRemote bool) error {
	if allowRemote || Loopback(addr) {
		return nil
	}
	return fmt.Errorf("--%s %s is not a loopback address: refused, since %w: anyone who reaches it could write any topic (a paymentProcessed that payments never decided) or change the schemas' compatibility. Listen on 127.0.0.1, run a real Kafka cluster with SASL and ACLs (--brokers, --registry), or pass --allow-remote-embedded on a network you trust", flag, addr, ErrRemoteAddr)
}

// checkAddrs checks both addresses of cfg (CheckAddr) and warns, as
// --auth none does, when AllowRemote lets a non-loopback one through.
func checkAddrs(cfg Config) error {
	for _, a := range []struct{ flag, addr string }{{"broker-addr", cfg.BrokerAddr}, {"registry-addr", cfg.RegistryAddr}} {
		if err := CheckAddr(a.flag, a.addr, cfg.AllowRemote); err != nil {
			return err
		}
		if !Loopback(a.addr) {
			cfg.Logger.Warn("the embedded stack listens on a non-loopback address (--allow-remote-embedded): anyone who can reach it may write any topic and change the registry, without credentials; use a real Kafka cluster with SASL and ACLs beyond a trusted network",
				"flag", "--"+a.flag, "addr", a.addr)
		}
	}
	return nil
}

// PrepareDataDir makes dir (mode 0700, readable by its owner only) if it
// does not exist, and checks one that exists as the development key's
// directory is checked (authn.LoadDevKey):
//   - writable by group or others (0775, 0777, 1777 such as /tmp): refused,
//     since anyone who may write there may replace the database (and with it
//     the payment records fulfillment ships by) or the key, and what they
//     wrote cannot be told apart;
//   - readable or searchable by group or others only (0755, the mode earlier
//     versions made it with): its mode is set to 0700 and a warning logged,
//     since they could read the orders, the wallets and the broker's log in
//     it; if that chmod fails (another owner), refused.
//
// It is what Start does first; `up` runs it also for a --data-dir that holds
// only SQLite or only the development key.
func PrepareDataDir(dir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("devstack: data directory %s: %w", dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("devstack: data directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("devstack: data directory %s is not a directory (--data-dir)", dir)
	}
	perm := fi.Mode().Perm()
	if perm&0o022 != 0 {
		return fmt.Errorf("devstack: data directory %s has mode %v: it must be writable by its owner only, or others may replace the database (and the payment records fulfillment ships by) or the development key (chmod 700 %s)", dir, perm, dir)
	}
	if perm&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("devstack: data directory %s has mode %v: group or others may read the orders, wallets and broker log in it, and its mode cannot be set to 0700 (%w): chmod 700 it, or choose another --data-dir", dir, perm, err)
		}
		log.Warn("the data directory was readable by group or others (they could read the orders, wallets and the broker's log in it): its mode is now 0700",
			"data_dir", dir, "was", perm.String())
	}
	return nil
}

// guardBroker caps ln at maxConns connections at once
// (netutil.LimitListener) and bounds each write to a connection by
// brokerWriteTimeout.
func guardBroker(ln net.Listener, maxConns int) net.Listener {
	return deadlineListener{netutil.LimitListener(ln, maxConns)}
}

type deadlineListener struct{ net.Listener }

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return writeDeadlineConn{c}, nil
}

// writeDeadlineConn sets a write deadline brokerWriteTimeout ahead before
// each Write.
type writeDeadlineConn struct{ net.Conn }

func (c writeDeadlineConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(brokerWriteTimeout))
	return c.Conn.Write(b)
}

// guardRegistry serves the registry's reads (GET, HEAD) and the POSTs the
// services make (registering a schema, looking one up, checking
// compatibility), and refuses with 403 every PUT and DELETE: setting the
// compatibility level or mode (PUT /config, PUT /mode) and deleting subjects
// or versions, which no ordercast process does and which would let a client
// register a schema that breaks the contracts (compatibility NONE) or make
// the ids on the topics unreadable.
func guardRegistry(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPost:
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(http.StatusForbidden)
		// Confluent's error body; 40301 is its "user is denied operation".
		_, _ = fmt.Fprintf(w, `{"error_code":40301,"message":"the embedded registry refuses %s: its compatibility level, mode and schemas are changed only by registering new versions"}`+"\n", r.Method)
	})
}

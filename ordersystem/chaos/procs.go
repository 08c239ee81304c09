package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one process slot: a service and a slot number, with a stable
// member id and HTTP port across restarts. The supervisor restarts it when it
// is down and wanted.
type proc struct {
	service string // "devstack", "checkout" or a consumer service
	slot    int
	name    string // service-slot: the member id and the log file name
	port    int    // --http port (services) or broker port (devstack)
	admin   int    // --admin-http port (services): /metrics

	mu       sync.Mutex
	cmd      *exec.Cmd
	pid      int
	incarn   int           // incarnation number, 1 for the first start
	running  bool          // started and not yet exited
	starting bool          // a start is under way (not yet running)
	stopped  bool          // SIGSTOPped
	want     bool          // the supervisor keeps it up
	exited   chan struct{} // closed when the current incarnation exits
	startErr error
}

func (p *proc) snapshot() (pid, incarn int, running, stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, p.incarn, p.running, p.stopped
}

// cluster runs and supervises the processes of one harness run.
type cluster struct {
	cfg     *Config
	hist    *history
	logDir  string
	brokers string
	regURL  string
	regPort int
	dsn     string

	// faultsArmed: processes started now get the crash points, disarmed
	// at faultsUntil (zero: by SIGUSR1 only). Guarded by mu.
	faultsArmed bool
	faultsUntil time.Time

	mu    sync.Mutex
	procs []*proc
	ctx   context.Context // supervision ends with it

	rc *realCluster // nil on the embedded broker

	restarts sync.WaitGroup
	onScrape func(p *proc) // scrape a process before it is signalled
}

// procHost is the loopback address the run's processes listen on (HTTP,
// devstack's broker and registry). Not 127.0.0.1: a port freePort found free
// there can be taken, before the process binds it, as the source port of
// one of the many outgoing connections to 127.0.0.1 (Kafka, PostgreSQL, the
// proxies), which the cluster soak hit ("address already in use" at every
// restart of one slot). Outgoing connections never use this address. It is
// one of this harness process's own (127.3.X.Y from its pid), not one
// shared by every harness on the machine: two soaks run side by side took
// each other's free ports there ("registry address 127.0.3.1:45027 is not
// free" at a seed's start).
var procHost = hostOf(os.Getpid())

// hostOf maps a pid to a loopback address 127.3.X.Y, X and Y in 1..250.
func hostOf(pid int) string { return fmt.Sprintf("127.3.%d.%d", pid/250%250+1, pid%250+1) }

func freePort() (int, error) {
	ln, err := net.Listen("tcp", procHost+":0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// addProc creates a slot (not started).
func (c *cluster) addProc(service string, slot int) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &proc{service: service, slot: slot, name: fmt.Sprintf("%s-%d", service, slot), port: port, admin: admin}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// slot returns the slot of service with number n, creating it if needed.
func (c *cluster) slot(service string, n int) (*proc, error) {
	c.mu.Lock()
	for _, p := range c.procs {
		if p.service == service && p.slot == n {
			c.mu.Unlock()
			return p, nil
		}
	}
	c.mu.Unlock()
	return c.addProc(service, n)
}

// list returns the slots of a service ("" for all services but devstack).
func (c *cluster) list(service string) []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*proc
	for _, p := range c.procs {
		if (service == "" && p.service != "devstack") || p.service == service {
			out = append(out, p)
		}
	}
	return out
}

func (c *cluster) args(p *proc) []string {
	if p.service == "devstack" {
		return []string{"devstack", "--data-dir", c.cfg.DataDir, "--broker-addr", procHost + ":" + strconv.Itoa(p.port),
			"--registry-addr", procHost + ":" + strconv.Itoa(c.regPort), "--log-level", "info", "--save-every", "1s"}
	}
	args := []string{"run", p.service, "--brokers", c.brokers, "--registry", c.regURL, "--db", c.dsn,
		"--http", procHost + ":" + strconv.Itoa(p.port), "--admin-http", procHost + ":" + strconv.Itoa(p.admin), "--log-level", "info"}
	if p.service == "checkout" || p.service == "payments" {
		// The services that seed the catalog and wallets (run refuses
		// these flags in the others).
		args = append(args, "--seed-data", c.cfg.SeedData, "--opening-credit", c.cfg.OpeningCredit)
	}
	if p.service == "checkout" {
		args = append(args, "--auth-dev-key", devKeyPath(c.cfg)) // the key the workload signs with
	}
	if c.rc != nil {
		args = append(args, "--replication-factor", strconv.Itoa(min(3, c.rc.nodes)),
			"--min-insync-replicas", strconv.Itoa(c.cfg.Cluster.MinInsyncReplicas))
	}
	return args
}

// start starts the slot's next incarnation and returns once it is started
// (not ready); for devstack it waits for the address line.
func (c *cluster) start(p *proc) error {
	p.mu.Lock()
	if p.running || p.starting {
		p.want = true
		p.mu.Unlock()
		return nil
	}
	p.want, p.starting = true, true
	p.incarn++
	incarn := p.incarn
	p.mu.Unlock()
	started := false
	defer func() {
		if !started {
			p.mu.Lock()
			p.starting = false
			p.mu.Unlock()
		}
	}()

	logf, err := os.OpenFile(filepath.Join(c.logDir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== chaos: start %s incarnation %d at %s\n", p.name, incarn, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.cfg.Binary, c.args(p)...)
	cmd.SysProcAttr = procAttr() // children die with the harness
	cmd.Env = append(os.Environ(),
		"ORDERCAST_MEMBER_ID="+p.name,
		"ORDERCAST_SESSION_TIMEOUT="+c.cfg.SessionTimeout.String())
	c.mu.Lock()
	armed, until := c.faultsArmed, c.faultsUntil
	c.mu.Unlock()
	if armed && p.service != "devstack" && p.service != "checkout" {
		if env := c.cfg.faultEnv(until); env != "" {
			cmd.Env = append(cmd.Env, "ORDERCAST_FAULT="+env)
		}
	}
	cmd.Stderr = logf
	var stdout io.ReadCloser
	if p.service == "devstack" {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.pid, p.running, p.starting, p.stopped, p.exited = cmd, cmd.Process.Pid, true, false, false, exited
	p.mu.Unlock()
	started = true
	c.hist.add(event{Ev: "start", Proc: p.name, PID: cmd.Process.Pid, Incarnation: incarn})

	ready := make(chan error, 1)
	if stdout != nil {
		go func() {
			sc := bufio.NewScanner(stdout)
			got := false
			for sc.Scan() {
				var info struct {
					Brokers []string `json:"brokers"`
				}
				if !got && json.Unmarshal(sc.Bytes(), &info) == nil && len(info.Brokers) > 0 {
					got = true
					ready <- nil
				}
				fmt.Fprintln(logf, sc.Text())
			}
			if !got {
				ready <- fmt.Errorf("%s exited before printing its addresses (see %s)", p.name, logf.Name())
			}
		}()
	} else {
		ready <- nil
	}
	go func() {
		err := cmd.Wait()
		code, sig := -1, ""
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				sig = ws.Signal().String()
			} else {
				code = ee.ExitCode()
			}
		} else if err == nil {
			code = 0
		}
		fmt.Fprintf(logf, "=== chaos: %s incarnation %d exited: code %d signal %q\n", p.name, incarn, code, sig)
		logf.Close()
		c.hist.add(event{Ev: "exit", Proc: p.name, PID: cmd.Process.Pid, Incarnation: incarn, Code: code, Signal: sig})
		p.mu.Lock()
		p.running, p.stopped = false, false
		want := p.want
		p.mu.Unlock()
		close(exited)
		if want {
			c.restartLater(p)
		}
	}()
	select {
	case err := <-ready:
		return err
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%s did not start within 60s (see %s)", p.name, logf.Name())
	}
}

// restartLater restarts a wanted slot after a pause of 0.3 to 1.5 s, as a
// supervisor with a restart delay would.
func (c *cluster) restartLater(p *proc) {
	c.restarts.Add(1)
	go func() {
		defer c.restarts.Done()
		d := 300*time.Millisecond + time.Duration(time.Now().UnixNano()%1200)*time.Millisecond
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(d):
		}
		p.mu.Lock()
		want := p.want && !p.running
		p.mu.Unlock()
		if !want {
			return
		}
		if err := c.start(p); err != nil {
			c.hist.add(event{Ev: "start_failed", Proc: p.name, Detail: err.Error()})
			c.restartLater(p)
		}
	}()
}

// signal sends sig to the slot's current incarnation; false if it is not
// running.
func (c *cluster) signal(p *proc, sig syscall.Signal) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running || p.cmd == nil {
		return false
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return false
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return true
}

// stopSlot stops a slot for good (until started again): SIGCONT if
// stopped, then sig, and waits for the exit (SIGKILL after timeout).
func (c *cluster) stopSlot(p *proc, sig syscall.Signal, timeout time.Duration) {
	p.mu.Lock()
	p.want = false
	exited := p.exited
	running := p.running
	p.mu.Unlock()
	if !running {
		return
	}
	c.signal(p, syscall.SIGCONT)
	c.signal(p, sig)
	select {
	case <-exited:
	case <-time.After(timeout):
		c.signal(p, syscall.SIGKILL)
		<-exited
	}
}

// waitHealthy polls /healthz of a service slot until it answers. On
// timeout the error says how many incarnations the slot went through,
// whether one is running, and ends with the last lines of its log, so that
// a slot that never came up (a failed start, a crash loop, a start still
// under way on an overloaded machine) can be told apart from the report
// alone.
func waitHealthy(ctx context.Context, c *cluster, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := fmt.Sprintf("http://%s:%d/healthz", procHost, p.port)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			_, incarn, running, _ := p.snapshot()
			logPath := filepath.Join(c.logDir, p.name+".log")
			return fmt.Errorf("%s not healthy within %v (last error %v; %d incarnations started, one running: %v); the end of %s:\n%s",
				p.name, timeout, err, incarn, running, logPath, logTail(logPath, 20))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logTail returns the last n lines of the file at path, each cut to 300
// bytes, or a note saying why it could not be read.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	for i, l := range lines {
		if len(l) > 300 {
			lines[i] = l[:300] + "..."
		}
	}
	return strings.Join(lines, "\n")
}

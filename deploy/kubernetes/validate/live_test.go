package validate

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lagMetric is the metric the HPA component scales on.
const lagMetric = "ordercast_group_lag_total"

var metricRe = regexp.MustCompile(`\bordercast_[a-z0-9_]+\b`)

// metricsUsed returns every metric name (ordercast_...) any rendered
// object mentions: the HPAs' external metrics, prometheus-adapter's rules.
func metricsUsed(t *testing.T) []string {
	seen := map[string]bool{}
	for _, dir := range kustomizations {
		for _, o := range render(t, dir) {
			for _, m := range metricRe.FindAllString(string(o.YAML), -1) {
				seen[m] = true
			}
		}
	}
	return sortedKeys(seen)
}

// TestServesWhatManifestsUse starts the system as the manifests run it, on
// an embedded broker and registry (`ordercast devstack`) and SQLite: one
// `ordercast run` of the five services with the union of the dev overlay's
// run flags (listeners on free loopback ports, replication factor 1, a
// generated JWK Set for --auth jwt). Then: the probe paths answer 200 on
// the port the probes use, every metric name the manifests mention is
// exported on the admin listener with each consumer group's label, and on
// SIGTERM the process drains and exits 0 within every workload's
// terminationGracePeriodSeconds less its preStop sleep.
func TestServesWhatManifestsUse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded broker and the five services: not under -short")
	}
	bin := binary(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	ds := exec.CommandContext(ctx, bin, "devstack", "--broker-addr", "127.0.0.1:0", "--registry-addr", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "devstack"))
	stdout, _ := ds.StdoutPipe()
	ds.Stderr = os.Stderr
	if err := ds.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ds.Process.Signal(syscall.SIGTERM); _ = ds.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("devstack: %v", err)
	}
	var stack struct {
		Brokers  []string
		Registry string
	}
	if err := json.Unmarshal([]byte(line), &stack); err != nil {
		t.Fatalf("devstack printed %q: %v", line, err)
	}
	go io.Copy(io.Discard, stdout)

	// The run flags of every dev workload, and the grace each has.
	flags := map[string]string{}
	var services []string
	minGrace := time.Duration(1 << 62)
	for _, p := range pods(render(t, "overlays/dev")) {
		c := p.Spec.Containers[0]
		path, pos, fl := commandOf(t, c.Args)
		if path[0] != "run" {
			continue
		}
		services = append(services, pos...)
		for k, v := range fl {
			flags[k] = v
		}
		grace := time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			grace -= time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
		minGrace = min(minGrace, grace)
	}
	pub, admin := freeAddr(t), freeAddr(t)
	pk, _, _ := ed25519.GenerateKey(rand.Reader)
	jwks := filepath.Join(dir, "jwks.json")
	os.WriteFile(jwks, fmt.Appendf(nil, `{"keys":[{"kty":"OKP","crv":"Ed25519","alg":"EdDSA","use":"sig","kid":"validate","x":%q}]}`,
		base64.RawURLEncoding.EncodeToString(pk)), 0o644)
	for k, v := range map[string]string{"http": pub, "admin-http": admin, "replication-factor": "1", "min-insync-replicas": "1",
		"auth-key-file": jwks, "auth-issuer": "https://issuer.invalid/", "auth-audience": "ordercast"} {
		if _, ok := flags[k]; !ok {
			t.Errorf("the dev overlay's run flags have no --%s", k)
		}
		flags[k] = v
	}
	args := append([]string{"run"}, services...)
	for _, k := range sortedKeys(flags) {
		args = append(args, "--"+k)
		if flags[k] != "" {
			args = append(args, flags[k])
		}
	}
	run := exec.Command(bin, args...)
	run.Env = append(os.Environ(), "KAFKA_BROKERS="+strings.Join(stack.Brokers, ","), "SCHEMA_REGISTRY_URL="+stack.Registry,
		"ORDERCAST_DB=sqlite:"+filepath.Join(dir, "ordercast.db"), "ORDERCAST_MEMBER_ID=fulfillment-0", "KAFKA_TLS=false")
	var logs strings.Builder
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	waitDone := make(chan struct{})
	go func() { exited <- run.Wait(); close(waitDone) }()
	defer func() {
		_ = run.Process.Kill() // a no-op once it exited
		<-waitDone
	}()
	t.Logf("ordercast %s", strings.Join(args, " "))

	get := func(url string) (int, string) {
		cl := http.Client{Timeout: 3 * time.Second}
		resp, err := cl.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	poll := func(what string, ok func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			done, last := ok()
			if done {
				return
			}
			select {
			case err := <-exited:
				t.Fatalf("%s: ordercast run exited (%v):\n%s", what, err, logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 2m; last: %s\n%s", what, last, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	poll("public /readyz 200", func() (bool, string) {
		code, body := get("http://" + pub + "/readyz")
		return code == 200, fmt.Sprint(code, " ", body)
	})
	for _, u := range []string{"http://" + pub + "/healthz", "http://" + admin + "/healthz", "http://" + admin + "/readyz"} {
		if code, body := get(u); code != 200 {
			t.Errorf("GET %s: %d %s", u, code, body)
		}
	}
	used := metricsUsed(t)
	if len(used) == 0 {
		t.Fatal("the manifests mention no metric: the check below would check nothing")
	}
	groups := []string{"orders", "payments", "notifications", "fulfillment"}
	poll("the manifests' metrics on /metrics", func() (bool, string) {
		_, body := get("http://" + admin + "/metrics")
		var missing []string
		for _, m := range used {
			for _, g := range groups {
				if !regexp.MustCompile(`(?m)^` + m + `\{[^}]*group="` + g + `"`).MatchString(body) {
					missing = append(missing, m+`{group="`+g+`"}`)
				}
			}
		}
		sort.Strings(missing)
		return len(missing) == 0, "missing " + strings.Join(missing, ", ")
	})
	t.Logf("metrics exported: %v for %v", used, groups)

	start := time.Now()
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		took := time.Since(start)
		if err != nil {
			t.Fatalf("after SIGTERM: %v\n%s", err, logs.String())
		}
		t.Logf("SIGTERM to exit 0: %v (the smallest grace less preStop: %v)", took.Round(time.Millisecond), minGrace)
		if took >= minGrace {
			t.Errorf("drain took %v, not within the smallest terminationGracePeriodSeconds less preStop, %v", took, minGrace)
		}
	case <-time.After(minGrace):
		t.Fatalf("no exit within %v of SIGTERM (the smallest terminationGracePeriodSeconds less preStop):\n%s", minGrace, logs.String())
	}
	if !strings.Contains(logs.String(), "shutting down") {
		t.Errorf("no shutdown line in the log:\n%s", logs.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

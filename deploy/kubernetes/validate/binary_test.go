package validate

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary builds ./cmd/ordercast of this checkout once per test run: the
// manifests are checked against what this build accepts and exports.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ordercast-validate-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "ordercast")
		cmd := exec.Command("go", "build", "-o", binPath, "./ordercast")
		cmd.Dir = filepath.Join("..", "..", "..", "cmd") // the module github.com/ordercast/ordercast/cmd
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./ordercast in cmd/: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// helpOf runs `ordercast ARGS... --help` and returns its flags (the
// command's own and those it inherits) and the variables its help names
// ("env NAME").
func helpOf(t *testing.T, args ...string) (flags, env map[string]bool, text string) {
	t.Helper()
	out, err := exec.Command(binary(t), append(args, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("ordercast %s --help: %v\n%s", strings.Join(args, " "), err, out)
	}
	flags, env = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`env ([A-Z][A-Z0-9_]+)`).FindAllStringSubmatch(string(out), -1) {
		env[m[1]] = true
	}
	return flags, env, string(out)
}

// goRuntimeEnv are variables the Go runtime reads, not the CLI.
var goRuntimeEnv = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true, "GOGC": true, "GODEBUG": true}

// commandOf splits a container's args into the command path the CLI
// resolves (run, topics create, acls), its positional arguments and its
// flags (name to value; a flag alone has value "").
func commandOf(t *testing.T, args []string) (path, positional []string, flags map[string]string) {
	t.Helper()
	flags = map[string]string{}
	i := 0
	for ; i < len(args) && !strings.HasPrefix(args[i], "-"); i++ {
		if len(path) == 0 || (path[0] == "topics" && len(path) == 1) {
			path = append(path, args[i])
		} else {
			positional = append(positional, args[i])
		}
	}
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			t.Errorf("args %q: %q is neither a flag nor a flag's value", args, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			val = args[i+1]
			i++
		}
		flags[name] = val
	}
	return path, positional, flags
}

var refRe = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestFlagsEnvPorts checks each container of every overlay against the
// binary: its command exists, the services it names are services, every
// flag is one the command accepts, every variable (env, and the keys of
// the ConfigMaps it takes with envFrom) is one the binary reads or one its
// args reference as $(NAME), every $(NAME) is defined, and --http and
// --admin-http listen on the container's ports named http and admin.
func TestFlagsEnvPorts(t *testing.T) {
	_, runEnv, runHelp := helpOf(t, "run")
	m := regexp.MustCompile(`Runs one or more of: ([a-z, ]+)\.`).FindStringSubmatch(runHelp)
	if m == nil {
		t.Fatalf("run --help names no services:\n%s", runHelp)
	}
	services := strings.Split(m[1], ", ")
	for _, dir := range kustomizations {
		objs := render(t, dir)
		cms := map[string]map[string]string{}
		for _, o := range objs {
			if cm, ok := o.Value.(*corev1.ConfigMap); ok {
				cms[o.Name] = cm.Data
			}
		}
		for _, p := range pods(objs) {
			for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				where := fmt.Sprintf("%s: %s %s container %s", dir, p.Kind, p.Name, c.Name)
				if len(c.Command) > 0 {
					t.Errorf("%s: command %q overrides the image's entrypoint", where, c.Command)
				}
				path, pos, flags := commandOf(t, c.Args)
				known, _, _ := helpOf(t, path...)
				if path[0] == "run" {
					if len(pos) == 0 {
						t.Errorf("%s: run names no service", where)
					}
					for _, s := range pos {
						if !slices.Contains(services, s) {
							t.Errorf("%s: run %s: not a service (%s)", where, s, strings.Join(services, ", "))
						}
					}
				}
				for f := range flags {
					if !known[f] {
						t.Errorf("%s: ordercast %s has no flag --%s", where, strings.Join(path, " "), f)
					}
				}
				defined := map[string]bool{}
				var names []string
				for _, e := range c.Env {
					names = append(names, e.Name)
				}
				for _, ef := range c.EnvFrom {
					if ef.ConfigMapRef == nil {
						t.Errorf("%s: envFrom other than a ConfigMap", where)
						continue
					}
					for k := range cms[ef.ConfigMapRef.Name] {
						names = append(names, k)
					}
				}
				refs := map[string]bool{}
				for _, a := range c.Args {
					for _, r := range refRe.FindAllStringSubmatch(a, -1) {
						refs[r[1]] = true
					}
				}
				for _, n := range names {
					defined[n] = true
					if !runEnv[n] && !goRuntimeEnv[n] && !refs[n] {
						t.Errorf("%s: variable %s is read by neither ordercast (run --help names %v) nor the Go runtime, nor referenced by the args", where, n, sortedKeys(runEnv))
					}
				}
				for r := range refs {
					if !defined[r] {
						t.Errorf("%s: args reference $(%s), which the container does not define", where, r)
					}
				}
				ports := map[string]int32{}
				for _, cp := range c.Ports {
					ports[cp.Name] = cp.ContainerPort
				}
				for flag, port := range map[string]string{"http": "http", "admin-http": "admin"} {
					v, ok := flags[flag]
					if path[0] != "run" {
						continue
					}
					if !ok {
						t.Errorf("%s: no --%s: the default is loopback, which the probes and Prometheus cannot reach", where, flag)
						continue
					}
					_, ps, err := net.SplitHostPort(v)
					if n, _ := strconv.Atoi(ps); err != nil || int32(n) != ports[port] {
						t.Errorf("%s: --%s %s, but the container port %s is %d", where, flag, v, port, ports[port])
					}
				}
			}
		}
	}
}

// TestScalersMatchGroups: every ScaledObject and HPA scales a workload of
// the overlay on the lag of the group that workload runs, at most to the
// partitions a topic is created with (run's --partitions default), and
// each KEDA trigger names one of the group's input topics, all of them
// covered: the topics the group's principal may READ (`ordercast acls -o
// json`) and does not write.
func TestScalersMatchGroups(t *testing.T) {
	_, _, runHelp := helpOf(t, "run")
	pm := regexp.MustCompile(`--partitions int32 .*\(default (\d+)\)`).FindStringSubmatch(runHelp)
	if pm == nil {
		t.Fatal("run --help: no default of --partitions")
	}
	partitions, _ := strconv.Atoi(pm[1])
	out, err := exec.Command(binary(t), "acls", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct{ Service, ResourceType, Name, Operation string }
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatal(err)
	}
	// A group's input topics: those it may READ and not WRITE (its retry
	// topics and the outbox relay's marker topic it also writes).
	writes := map[string]bool{}
	for _, r := range rows {
		if r.ResourceType == "Topic" && r.Operation == "WRITE" {
			writes[r.Service+"/"+r.Name] = true
		}
	}
	inputs := map[string][]string{}
	for _, r := range rows {
		if r.ResourceType == "Topic" && r.Operation == "READ" && !writes[r.Service+"/"+r.Name] {
			inputs[r.Service] = append(inputs[r.Service], r.Name)
		}
	}
	params := kafkaScalerParams(t)
	for _, dir := range []string{"overlays/production", "overlays/production-hpa"} {
		objs := render(t, dir)
		brokers := ""
		for _, o := range objs {
			if cm, ok := o.Value.(*corev1.ConfigMap); ok && o.Name == "ordercast-kafka" {
				brokers = cm.Data["KAFKA_BROKERS"]
			}
		}
		workloads := map[string]string{}
		for _, p := range pods(objs) {
			workloads[p.Kind+"/"+p.Name] = p.Name
		}
		scaled := map[string]bool{}
		for _, o := range objs {
			switch o.Kind {
			case "ScaledObject":
				checkScaledObject(t, dir, o, objs, workloads, inputs, partitions, brokers, params, scaled)
			case "HorizontalPodAutoscaler":
				checkHPA(t, dir, o, workloads, partitions, scaled)
			}
		}
		for g := range inputs {
			if g != "checkout" && !scaled[g] && len(inputs[g]) > 0 {
				t.Errorf("%s: group %s has no autoscaler", dir, g)
			}
		}
	}
}

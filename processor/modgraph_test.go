package processor

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// orderSystemModules are modules of the order system (ordersystem/, cmd/)
// that a program depending on the runtime must never find in its module
// graph, named here so that the check holds even if the runtime's own
// go.mod came to require one of them: the CLI, the Avro and schema-registry
// serde, the browser test, the OpenTelemetry SDK and exporter, the load
// generator, the OpenAPI validator and checkout's JWT libraries.
var orderSystemModules = []string{
	"github.com/spf13/cobra",
	"github.com/spf13/pflag",
	"github.com/hamba/avro/v2",
	"github.com/twmb/franz-go/pkg/sr",
	"github.com/chromedp/chromedp",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp",
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
	"github.com/tsenart/vegeta/v12",
	"github.com/getkin/kin-openapi",
	"github.com/golang-jwt/jwt/v5",
	"github.com/MicahParks/keyfunc/v3",
}

// goModRequires returns the module paths the go.mod in dir requires
// (`go mod edit -json`: the file alone, nothing downloaded).
func goModRequires(t *testing.T, goBin, dir string) []string {
	t.Helper()
	cmd := exec.Command(goBin, "mod", "edit", "-json")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	var mf struct{ Require []struct{ Path string } }
	if err := json.Unmarshal(out, &mf); err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	var paths []string
	for _, r := range mf.Require {
		paths = append(paths, r.Path)
	}
	return paths
}

// TestAdopterModuleGraph: a module that requires the runtime (this module,
// replaced by the checkout) and imports processor, inbox and outbox gets none
// of the order system's modules in its module graph (`go list -m all`, the
// graph `go get github.com/ordercast/ordercast@vX.Y.Z` gives, not only what
// it links): neither one that ordersystem/'s or cmd/'s go.mod requires and
// the runtime's does not, nor one of orderSystemModules. It runs offline
// (GOPROXY=off) from the module cache, which `go mod download` in this
// module fills; docs/architecture.md describes the modules.
func TestAdopterModuleGraph(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipped: this test runs `go list -m all` in a throwaway module and needs the go command on PATH: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	const self = "github.com/ordercast/ordercast"
	runtime := goModRequires(t, goBin, root)
	forbidden := map[string]string{}
	for _, m := range orderSystemModules {
		forbidden[m] = "an order system module"
	}
	var orderSystem []string
	for _, dir := range []string{"ordersystem", "cmd"} {
		for _, m := range goModRequires(t, goBin, filepath.Join(root, dir)) {
			orderSystem = append(orderSystem, m)
			if !strings.HasPrefix(m, self) && !slices.Contains(runtime, m) {
				forbidden[m] = "required by " + dir + "/go.mod and not by the runtime's"
			}
		}
	}
	for _, m := range orderSystemModules {
		if !slices.Contains(orderSystem, m) {
			t.Errorf("%s is no longer required by ordersystem/go.mod or cmd/go.mod: take it off orderSystemModules", m)
		}
	}

	dir := t.TempDir()
	gomod := "module example.com/adopter\n\ngo 1.26.0\n\nrequire " + self + " v0.0.0\n\nreplace " + self + " => " + root + "\n"
	main := "package main\n\nimport (\n\t_ \"" + self + "/inbox\"\n\t_ \"" + self + "/outbox\"\n\t_ \"" + self + "/processor\"\n)\n\nfunc main() {}\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"go.mod": []byte(gomod), "main.go": []byte(main), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(args ...string) []string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
		out, err := cmd.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("go %s in the adopter module (offline: run `go mod download` in the repository's root first): %v\n%s",
				strings.Join(args, " "), err, stderr)
		}
		return strings.Fields(string(out))
	}
	graph := goCmd("list", "-m", "-f", "{{.Path}}", "all")
	if !slices.Contains(graph, self) || !slices.Contains(graph, "github.com/twmb/franz-go") {
		t.Fatalf("go list -m all of the adopter: %v; want the runtime and franz-go among them", graph)
	}
	for _, m := range graph {
		if why, ok := forbidden[m]; ok {
			t.Errorf("an adopter of the runtime has %s in its module graph (%s)", m, why)
		}
	}
	// The imports resolve in that graph, offline.
	for _, m := range goCmd("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".") {
		if why, ok := forbidden[m]; ok {
			t.Errorf("the adopter links a package of %s (%s)", m, why)
		}
	}
	t.Logf("the adopter's module graph: %d modules (the runtime's go.mod requires %d; %d are the order system's only)",
		len(graph), len(runtime), len(forbidden))
}

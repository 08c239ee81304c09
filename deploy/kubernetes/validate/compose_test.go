package validate

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

const composeFile = "../../compose/compose.yaml"

// loadCompose loads path with compose-spec's loader as `docker compose`
// does: validated against the compose specification's JSON schema (an
// unknown key fails), anchors and merges resolved, paths made absolute.
func loadCompose(t *testing.T, path string) (*types.Project, error) {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("ordercast", true) })
}

// TestCompose loads deploy/compose/compose.yaml and checks it against the
// binary: the services named, each ordercast command's flags and
// variables, the files it mounts present, and Prometheus scraping every
// service's admin port.
func TestCompose(t *testing.T) {
	p, err := loadCompose(t, composeFile)
	if err != nil {
		t.Fatalf("compose-spec loader: %v", err)
	}
	names := p.ServiceNames()
	for _, want := range []string{"kafka-1", "kafka-2", "kafka-3", "postgres", "schema-registry", "setup", "checkout", "orders",
		"payments", "notifications", "fulfillment", "prometheus", "grafana"} {
		if !slices.Contains(names, want) {
			t.Errorf("no service %s (have %v)", want, names)
		}
	}
	_, runEnv, _ := helpOf(t, "run")
	admins := map[string]bool{}
	for _, s := range p.Services {
		if s.Image != "ordercast:dev" {
			continue
		}
		path, pos, flags := commandOf(t, s.Command)
		known, _, _ := helpOf(t, path...)
		for f := range flags {
			if !known[f] {
				t.Errorf("compose %s: ordercast %s has no flag --%s", s.Name, strings.Join(path, " "), f)
			}
		}
		for k := range s.Environment {
			if !runEnv[k] {
				t.Errorf("compose %s: variable %s is not one ordercast reads", s.Name, k)
			}
		}
		if path[0] == "run" {
			if len(pos) != 1 || pos[0] != s.Name {
				t.Errorf("compose %s runs %v", s.Name, pos)
			}
			if flags["admin-http"] != "0.0.0.0:9180" {
				t.Errorf("compose %s: --admin-http %q, want 0.0.0.0:9180 (Prometheus scrapes it by service name)", s.Name, flags["admin-http"])
			}
			admins[s.Name+":9180"] = true
			if s.User != "65532:65532" || !s.ReadOnly {
				t.Errorf("compose %s: user %q read_only %v, want the image's user and a read-only root", s.Name, s.User, s.ReadOnly)
			}
			if s.DependsOn["setup"].Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("compose %s: does not wait for setup's topics", s.Name)
			}
		}
		if s.Name == "fulfillment" && s.Environment["ORDERCAST_MEMBER_ID"] == nil {
			t.Errorf("compose fulfillment: no ORDERCAST_MEMBER_ID")
		}
	}
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("compose %s mounts %s: %v", s.Name, v.Source, err)
			}
		}
	}
	var prom struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	b, err := os.ReadFile("../../compose/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &prom); err != nil {
		t.Fatal(err)
	}
	scraped := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				scraped[tg] = true
			}
		}
	}
	for a := range admins {
		if !scraped[a] {
			t.Errorf("compose prometheus.yml does not scrape %s", a)
		}
	}
	if !slices.Contains(prom.RuleFiles, "alerts.yml") {
		t.Errorf("compose prometheus.yml rule_files %v: want deploy/prometheus's alerts.yml", prom.RuleFiles)
	}
}

// TestComposeLoaderRefuses: the loader is strict, so the check above means
// something: a key the compose specification does not have fails.
func TestComposeLoaderRefuses(t *testing.T) {
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	bad := regexp.MustCompile(`(?m)^  postgres:\n`).ReplaceAll(b, []byte("  postgres:\n    restart_policy: always\n"))
	dir := t.TempDir()
	path := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadCompose(t, path); err == nil || !strings.Contains(err.Error(), "restart_policy") {
		t.Errorf("an unknown key loaded without the error naming it: %v", err)
	}
}

package validate

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizations are the directories under deploy/kubernetes that are
// applied: each is rendered as `kustomize build DIR` would.
var kustomizations = []string{"overlays/dev", "overlays/production", "overlays/production-hpa", "setup"}

// object is one rendered object: its kind, name and YAML, and the typed
// value it decoded into.
type object struct {
	Kind, Name string
	YAML       []byte
	Value      any
}

// newTyped returns a pointer to the Go type of apiVersion/kind, or nil for
// a kind decoded against a CRD schema instead.
func newTyped(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/Service":
		return &corev1.Service{}
	case "v1/Namespace":
		return &corev1.Namespace{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "batch/v1/Job":
		return &batchv1.Job{}
	}
	return nil
}

// render runs kustomize in-process on deploy/kubernetes/dir and decodes
// every object strictly: a field its type does not have, or a field
// given twice, fails (sigs.k8s.io/yaml UnmarshalStrict); a kind with
// neither a Go type here nor a CRD schema fails too.
func render(t *testing.T, dir string) []object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join("..", dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []object
	for _, r := range rm.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		o := object{Kind: r.GetKind(), Name: r.GetName(), YAML: b}
		if v := newTyped(r.GetApiVersion(), r.GetKind()); v != nil {
			if err := yaml.UnmarshalStrict(b, v); err != nil {
				t.Errorf("%s: %s %s: %v", dir, o.Kind, o.Name, err)
				continue
			}
			o.Value = v
		} else if s := crdSchema(t, r.GetApiVersion(), r.GetKind()); s != nil {
			var v map[string]any
			if err := yaml.UnmarshalStrict(b, &v); err != nil {
				t.Fatal(err)
			}
			for _, e := range s.check("", v) {
				t.Errorf("%s: %s %s: %s", dir, o.Kind, o.Name, e)
			}
			o.Value = v
		} else {
			t.Errorf("%s: %s %s: no Go type nor CRD schema for %s to check it against", dir, o.Kind, o.Name, r.GetApiVersion())
		}
		out = append(out, o)
	}
	return out
}

func TestRenderStrict(t *testing.T) {
	for _, dir := range kustomizations {
		objs := render(t, dir)
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.Kind]++
		}
		t.Logf("%s: %d objects %v", dir, len(objs), kinds)
	}
}

// podSpec is a workload's pod template spec and its annotations.
type podSpec struct {
	Kind, Name  string
	Spec        corev1.PodSpec
	Annotations map[string]string
}

func pods(objs []object) []podSpec {
	var out []podSpec
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			out = append(out, podSpec{o.Kind, o.Name, v.Spec.Template.Spec, v.Spec.Template.Annotations})
		case *appsv1.StatefulSet:
			out = append(out, podSpec{o.Kind, o.Name, v.Spec.Template.Spec, v.Spec.Template.Annotations})
		case *batchv1.Job:
			out = append(out, podSpec{o.Kind, o.Name, v.Spec.Template.Spec, v.Spec.Template.Annotations})
		}
	}
	return out
}

func find[T any](objs []object, kind, name string) (T, bool) {
	var zero T
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			if v, ok := o.Value.(T); ok {
				return v, true
			}
		}
	}
	return zero, false
}

// TestLayout checks what the docs promise of the manifests: a workload and
// a disruption budget per service, fulfillment a StatefulSet with its pod
// name as member id, the probes on the real paths and named ports, the
// scrape annotations on the admin port, every Secret and ConfigMap a
// workload names present in the dev overlay with the key it reads, and
// replicas bounded by the partitions.
func TestLayout(t *testing.T) {
	dev := render(t, "overlays/dev")
	services := []string{"checkout", "orders", "payments", "notifications", "fulfillment"}
	for _, dir := range kustomizations[:3] {
		objs := render(t, dir)
		for _, svc := range services {
			kind := "Deployment"
			if svc == "fulfillment" {
				kind = "StatefulSet"
			}
			found := false
			for _, p := range pods(objs) {
				found = found || p.Kind == kind && p.Name == svc
			}
			if !found {
				t.Errorf("%s: no %s %s", dir, kind, svc)
			}
			pdb, ok := find[*policyv1.PodDisruptionBudget](objs, "PodDisruptionBudget", svc)
			if !ok {
				t.Errorf("%s: no PodDisruptionBudget %s", dir, svc)
			} else if pdb.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != svc {
				t.Errorf("%s: PodDisruptionBudget %s selects %v", dir, svc, pdb.Spec.Selector.MatchLabels)
			}
		}
		if sts, ok := find[*appsv1.StatefulSet](objs, "StatefulSet", "fulfillment"); ok {
			var ok bool
			for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "ORDERCAST_MEMBER_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s: fulfillment's ORDERCAST_MEMBER_ID is not its pod name", dir)
			}
			if _, ok := find[*corev1.Service](objs, "Service", sts.Spec.ServiceName); !ok {
				t.Errorf("%s: fulfillment's serviceName %q has no Service", dir, sts.Spec.ServiceName)
			}
		}
		for _, p := range pods(objs) {
			if p.Kind == "Job" {
				continue
			}
			c := p.Spec.Containers[0]
			ports := map[string]int32{}
			for _, cp := range c.Ports {
				ports[cp.Name] = cp.ContainerPort
			}
			for what, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
				want := map[string]string{"readiness": "/readyz", "liveness": "/healthz", "startup": "/healthz"}[what]
				if pr == nil || pr.HTTPGet == nil {
					t.Errorf("%s: %s: no %s probe over HTTP", dir, p.Name, what)
					continue
				}
				if pr.HTTPGet.Path != want {
					t.Errorf("%s: %s: %s probe on %s, want %s", dir, p.Name, what, pr.HTTPGet.Path, want)
				}
				if _, ok := ports[pr.HTTPGet.Port.String()]; !ok {
					t.Errorf("%s: %s: %s probe on port %s, which the container does not name", dir, p.Name, what, pr.HTTPGet.Port.String())
				}
			}
			if p.Annotations["prometheus.io/scrape"] != "true" || p.Annotations["prometheus.io/path"] != "/metrics" ||
				p.Annotations["prometheus.io/port"] != fmt.Sprint(ports["admin"]) {
				t.Errorf("%s: %s: scrape annotations %v, want /metrics on the admin port %d", dir, p.Name, p.Annotations, ports["admin"])
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: %s: requests %v limits %v: want cpu and memory requests and a memory limit", dir, p.Name, c.Resources.Requests, c.Resources.Limits)
			}
		}
	}
	// Every Secret and ConfigMap key a workload of any overlay reads is
	// in the dev overlay's (the placeholder Secrets and the ConfigMaps).
	keys := map[string]bool{}
	for _, o := range dev {
		switch v := o.Value.(type) {
		case *corev1.Secret:
			for k := range v.StringData {
				keys["Secret/"+o.Name+"/"+k] = true
			}
			for k := range v.Data {
				keys["Secret/"+o.Name+"/"+k] = true
			}
		case *corev1.ConfigMap:
			for k := range v.Data {
				keys["ConfigMap/"+o.Name+"/"+k] = true
			}
			keys["ConfigMap/"+o.Name] = true
		}
	}
	var missing []string
	for _, dir := range kustomizations {
		for _, p := range pods(render(t, dir)) {
			for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				for _, e := range c.Env {
					if e.ValueFrom == nil {
						continue
					}
					if r := e.ValueFrom.SecretKeyRef; r != nil && !keys["Secret/"+r.Name+"/"+r.Key] {
						missing = append(missing, fmt.Sprintf("%s %s: Secret %s key %s", dir, p.Name, r.Name, r.Key))
					}
					if r := e.ValueFrom.ConfigMapKeyRef; r != nil && !keys["ConfigMap/"+r.Name+"/"+r.Key] {
						missing = append(missing, fmt.Sprintf("%s %s: ConfigMap %s key %s", dir, p.Name, r.Name, r.Key))
					}
				}
				for _, ef := range c.EnvFrom {
					if ef.ConfigMapRef != nil && !keys["ConfigMap/"+ef.ConfigMapRef.Name] {
						missing = append(missing, fmt.Sprintf("%s %s: ConfigMap %s", dir, p.Name, ef.ConfigMapRef.Name))
					}
				}
			}
			for _, v := range p.Spec.Volumes {
				if s := v.Secret; s != nil {
					for _, it := range s.Items {
						if !keys["Secret/"+s.SecretName+"/"+it.Key] {
							missing = append(missing, fmt.Sprintf("%s %s: volume Secret %s key %s", dir, p.Name, s.SecretName, it.Key))
						}
					}
				}
				if cm := v.ConfigMap; cm != nil {
					for _, it := range cm.Items {
						if !keys["ConfigMap/"+cm.Name+"/"+it.Key] {
							missing = append(missing, fmt.Sprintf("%s %s: volume ConfigMap %s key %s", dir, p.Name, cm.Name, it.Key))
						}
					}
				}
			}
		}
	}
	sort.Strings(missing)
	for _, m := range slicesCompact(missing) {
		t.Errorf("not in the dev overlay's Secrets and ConfigMaps: %s", m)
	}
}

func slicesCompact(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// TestNoSecretInBase: the base and the production overlays carry no Secret
// (they come from the operator's secret store), so no placeholder password
// reaches a real cluster through them.
func TestNoSecretInBase(t *testing.T) {
	for _, dir := range []string{"overlays/production", "overlays/production-hpa", "setup"} {
		for _, o := range render(t, dir) {
			if o.Kind == "Secret" {
				t.Errorf("%s renders Secret %s", dir, o.Name)
			}
			if bytes.Contains(o.YAML, []byte("CHANGE-ME")) {
				t.Errorf("%s: %s %s has a placeholder", dir, o.Kind, o.Name)
			}
		}
	}
}

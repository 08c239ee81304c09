package validate

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// schema is the part of a CRD's openAPIV3Schema (apiextensions.k8s.io/v1
// JSONSchemaProps) that the check below reads. The CRDs are KEDA's, as
// published in its module (config/crd/bases, v2.20.2), vendored in
// testdata/keda: KEDA's Go types need a newer Go and controller-runtime to
// build than this module can take.
type schema struct {
	Type                 string             `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	Items                *schema            `json:"items"`
	Required             []string           `json:"required"`
	Enum                 []any              `json:"enum"`
	AdditionalProperties *schema            `json:"additionalProperties"`
	PreserveUnknown      bool               `json:"x-kubernetes-preserve-unknown-fields"`
	IntOrString          bool               `json:"x-kubernetes-int-or-string"`
}

type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema *schema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

var (
	crdOnce  sync.Once
	crdIndex map[string]*schema // "group/version/kind"
	crdErr   error
)

// crdSchema returns the vendored CRD schema of apiVersion/kind, or nil.
func crdSchema(t *testing.T, apiVersion, kind string) *schema {
	t.Helper()
	crdOnce.Do(func() {
		crdIndex = map[string]*schema{}
		files, _ := filepath.Glob("testdata/keda/*.yaml")
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				crdErr = err
				return
			}
			var c crd
			if err := yaml.Unmarshal(b, &c); err != nil {
				crdErr = fmt.Errorf("%s: %w", f, err)
				return
			}
			for _, v := range c.Spec.Versions {
				crdIndex[c.Spec.Group+"/"+v.Name+"/"+c.Spec.Names.Kind] = v.Schema.OpenAPIV3Schema
			}
		}
		if len(crdIndex) == 0 {
			crdErr = fmt.Errorf("no CRD in testdata/keda")
		}
	})
	if crdErr != nil {
		t.Fatal(crdErr)
	}
	return crdIndex[apiVersion+"/"+kind]
}

// check returns what in v the schema refuses: a field it does not declare
// (the API server would prune it: unknown = failure here), a required field
// missing, a value of the wrong type or outside its enum. metadata is
// decoded strictly into ObjectMeta, as the API server does.
func (s *schema) check(path string, v any) []string {
	var errs []string
	bad := func(f string, a ...any) { errs = append(errs, (path+": ")+fmt.Sprintf(f, a...)) }
	if path == ".metadata" {
		b, _ := yaml.Marshal(v)
		var m metav1.ObjectMeta
		if err := yaml.UnmarshalStrict(b, &m); err != nil {
			bad("%v", err)
		}
		return errs
	}
	if s.IntOrString {
		switch v.(type) {
		case string, float64, int64:
		default:
			bad("want an integer or a string, got %T", v)
		}
		return errs
	}
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("want an object, got %T", v)
			return errs
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				bad("required field %q missing", r)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch {
			case s.Properties[k] != nil:
				errs = append(errs, s.Properties[k].check(path+"."+k, m[k])...)
			case s.AdditionalProperties != nil:
				errs = append(errs, s.AdditionalProperties.check(path+"."+k, m[k])...)
			case s.PreserveUnknown:
			default:
				bad("unknown field %q (the schema has %s)", k, strings.Join(sortedKeys(s.Properties), ", "))
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("want an array, got %T", v)
			return errs
		}
		for i, e := range a {
			if s.Items != nil {
				errs = append(errs, s.Items.check(fmt.Sprintf("%s[%d]", path, i), e)...)
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			bad("want a string, got %T (%v)", v, v)
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != math.Trunc(f) {
			bad("want an integer, got %T (%v)", v, v)
		}
	case "number":
		if _, ok := v.(float64); !ok {
			bad("want a number, got %T", v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("want a boolean, got %T (%v)", v, v)
		}
	case "":
		if !s.PreserveUnknown {
			bad("schema without a type")
		}
	}
	if len(s.Enum) > 0 {
		ok := false
		for _, e := range s.Enum {
			ok = ok || fmt.Sprint(e) == fmt.Sprint(v)
		}
		if !ok {
			bad("%v is not one of %v", v, s.Enum)
		}
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCRDCheckRefuses: the schema check is not a no-op: an unknown field,
// a wrong type and a value outside an enum are each refused.
func TestCRDCheckRefuses(t *testing.T) {
	s := crdSchema(t, "keda.sh/v1alpha1", "ScaledObject")
	if s == nil {
		t.Fatal("no ScaledObject schema")
	}
	base := func() map[string]any {
		return map[string]any{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": map[string]any{"name": "x"},
			"spec": map[string]any{"scaleTargetRef": map[string]any{"name": "x"}, "maxReplicaCount": float64(6),
				"triggers": []any{map[string]any{"type": "kafka", "metadata": map[string]any{"topic": "t"}}}}}
	}
	if errs := s.check("", base()); len(errs) > 0 {
		t.Fatalf("a valid ScaledObject refused: %v", errs)
	}
	for name, mutate := range map[string]func(map[string]any){
		"unknown field":    func(o map[string]any) { o["spec"].(map[string]any)["maxReplicas"] = float64(6) },
		"wrong type":       func(o map[string]any) { o["spec"].(map[string]any)["maxReplicaCount"] = "6" },
		"metadata field":   func(o map[string]any) { o["metadata"].(map[string]any)["label"] = "x" },
		"missing required": func(o map[string]any) { delete(o["spec"].(map[string]any), "scaleTargetRef") },
	} {
		o := base()
		mutate(o)
		if errs := s.check("", o); len(errs) == 0 {
			t.Errorf("%s: not refused", name)
		}
	}
}

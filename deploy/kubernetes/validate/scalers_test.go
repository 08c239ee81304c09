package validate

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/yaml"
)

// scalerParam is a metadata or authentication parameter of KEDA's kafka
// scaler, from testdata/keda/kafka-scaler-params.tsv: the `keda:"name=..."`
// tags of pkg/scalers/kafka_scaler.go in KEDA v2.20.2.
type scalerParam struct {
	trigger, auth bool     // read from the trigger's metadata / from a TriggerAuthentication
	enum          []string // the values allowed, if any
}

func kafkaScalerParams(t *testing.T) map[string]scalerParam {
	t.Helper()
	b, err := os.ReadFile("testdata/keda/kafka-scaler-params.tsv")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]scalerParam{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") || sc.Text() == "" {
			continue
		}
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 {
			t.Fatalf("kafka-scaler-params.tsv: %q", sc.Text())
		}
		p := scalerParam{trigger: strings.Contains(f[1], "triggerMetadata"), auth: strings.Contains(f[1], "authParams")}
		if f[2] != "" {
			p.enum = strings.Split(f[2], ";")
		}
		out[f[0]] = p
	}
	return out
}

type scaledObject struct {
	Spec struct {
		ScaleTargetRef  struct{ APIVersion, Kind, Name string } `json:"scaleTargetRef"`
		MinReplicaCount *int                                    `json:"minReplicaCount"`
		MaxReplicaCount *int                                    `json:"maxReplicaCount"`
		Triggers        []struct {
			Type              string                 `json:"type"`
			Name              string                 `json:"name"`
			Metadata          map[string]string      `json:"metadata"`
			AuthenticationRef *struct{ Name string } `json:"authenticationRef"`
		} `json:"triggers"`
	} `json:"spec"`
}

type triggerAuth struct {
	Spec struct {
		SecretTargetRef []struct{ Parameter, Name, Key string } `json:"secretTargetRef"`
	} `json:"spec"`
}

func checkScaledObject(t *testing.T, dir string, o object, objs []object, workloads map[string]string,
	inputs map[string][]string, partitions int, brokers string, params map[string]scalerParam, scaled map[string]bool) {
	t.Helper()
	var so scaledObject
	if err := yaml.Unmarshal(o.YAML, &so); err != nil {
		t.Fatal(err)
	}
	where := dir + ": ScaledObject " + o.Name
	ref := so.Spec.ScaleTargetRef
	group, ok := workloads[ref.Kind+"/"+ref.Name]
	if !ok || ref.APIVersion != "apps/v1" {
		t.Errorf("%s: scales %s %s/%s, not a workload of the overlay", where, ref.APIVersion, ref.Kind, ref.Name)
		return
	}
	scaled[group] = true
	if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount > partitions {
		t.Errorf("%s: maxReplicaCount %v, want at most the %d partitions of a topic", where, so.Spec.MaxReplicaCount, partitions)
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
		t.Errorf("%s: minReplicaCount %v: want at least 1 (a group without members raises OrdercastGroupWithoutMembers)", where, so.Spec.MinReplicaCount)
	}
	var topics []string
	for _, tr := range so.Spec.Triggers {
		tw := where + " trigger " + tr.Name
		if tr.Type != "kafka" {
			t.Errorf("%s: type %s, want kafka", tw, tr.Type)
			continue
		}
		md := tr.Metadata
		for k, v := range md {
			p, ok := params[k]
			if !ok || !p.trigger {
				t.Errorf("%s: metadata %s is not a parameter of KEDA's kafka scaler", tw, k)
				continue
			}
			if len(p.enum) > 0 && !slices.Contains(p.enum, v) {
				t.Errorf("%s: %s %q, want one of %v", tw, k, v, p.enum)
			}
		}
		for _, k := range []string{"bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
			"offsetResetPolicy", "allowIdleConsumers", "limitToPartitionsWithLag"} {
			if _, ok := md[k]; !ok {
				t.Errorf("%s: no %s", tw, k)
			}
		}
		// The rules of kafkaMetadata.Validate (KEDA v2.20.2).
		if n, err := strconv.ParseInt(md["lagThreshold"], 10, 64); err != nil || n <= 0 {
			t.Errorf("%s: lagThreshold %q: want a positive number", tw, md["lagThreshold"])
		}
		if n, err := strconv.ParseInt(md["activationLagThreshold"], 10, 64); err != nil || n < 0 {
			t.Errorf("%s: activationLagThreshold %q: want a non-negative number", tw, md["activationLagThreshold"])
		}
		for _, k := range []string{"allowIdleConsumers", "limitToPartitionsWithLag"} {
			if _, err := strconv.ParseBool(md[k]); err != nil {
				t.Errorf("%s: %s %q: want true or false", tw, k, md[k])
			}
		}
		if md["allowIdleConsumers"] == "true" && md["limitToPartitionsWithLag"] == "true" {
			t.Errorf("%s: allowIdleConsumers and limitToPartitionsWithLag cannot be set together", tw)
		}
		if md["consumerGroup"] != group {
			t.Errorf("%s: consumerGroup %s, but it scales %s", tw, md["consumerGroup"], group)
		}
		if md["bootstrapServers"] != brokers {
			t.Errorf("%s: bootstrapServers %s, but the services' KAFKA_BROKERS is %s", tw, md["bootstrapServers"], brokers)
		}
		if md["offsetResetPolicy"] != "earliest" {
			t.Errorf("%s: offsetResetPolicy %s: the services start a partition without a committed offset at the earliest record (run --start-offset)", tw, md["offsetResetPolicy"])
		}
		if md["sasl"] != "scram_sha512" || md["tls"] != "enable" {
			t.Errorf("%s: sasl %q tls %q: the services use SCRAM-SHA-512 over TLS", tw, md["sasl"], md["tls"])
		}
		topics = append(topics, md["topic"])
		if tr.AuthenticationRef == nil {
			t.Errorf("%s: no authenticationRef", tw)
			continue
		}
		var ta triggerAuth
		found := false
		for _, x := range objs {
			if x.Kind == "TriggerAuthentication" && x.Name == tr.AuthenticationRef.Name {
				found = true
				if err := yaml.Unmarshal(x.YAML, &ta); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !found {
			t.Errorf("%s: TriggerAuthentication %s not in the overlay", tw, tr.AuthenticationRef.Name)
			continue
		}
		got := map[string]bool{}
		for _, s := range ta.Spec.SecretTargetRef {
			got[s.Parameter] = true
			if p, ok := params[s.Parameter]; !ok || !p.auth {
				t.Errorf("%s: TriggerAuthentication parameter %s is not an auth parameter of KEDA's kafka scaler", tw, s.Parameter)
			}
			if s.Parameter == "username" || s.Parameter == "password" {
				if s.Name != "ordercast-kafka-"+group {
					t.Errorf("%s: %s from Secret %s, want the group's principal, ordercast-kafka-%s", tw, s.Parameter, s.Name, group)
				}
			}
		}
		for _, p := range []string{"username", "password", "ca"} {
			if !got[p] {
				t.Errorf("%s: TriggerAuthentication gives no %s", tw, p)
			}
		}
	}
	sort.Strings(topics)
	want := slices.Clone(inputs[group])
	sort.Strings(want)
	if !slices.Equal(topics, want) {
		t.Errorf("%s: triggers on topics %v, but group %s reads %v", where, topics, group, want)
	}
}

func checkHPA(t *testing.T, dir string, o object, workloads map[string]string, partitions int, scaled map[string]bool) {
	t.Helper()
	h := o.Value.(*autoscalingv2.HorizontalPodAutoscaler)
	where := dir + ": HorizontalPodAutoscaler " + o.Name
	ref := h.Spec.ScaleTargetRef
	group, ok := workloads[ref.Kind+"/"+ref.Name]
	if !ok {
		t.Errorf("%s: scales %s/%s, not a workload of the overlay", where, ref.Kind, ref.Name)
		return
	}
	scaled[group] = true
	if int(h.Spec.MaxReplicas) > partitions {
		t.Errorf("%s: maxReplicas %d, want at most the %d partitions of a topic", where, h.Spec.MaxReplicas, partitions)
	}
	if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].External == nil {
		t.Errorf("%s: want one External metric", where)
		return
	}
	m := h.Spec.Metrics[0].External.Metric
	if m.Name != lagMetric {
		t.Errorf("%s: metric %s, want %s", where, m.Name, lagMetric)
	}
	if m.Selector == nil || m.Selector.MatchLabels["group"] != group {
		t.Errorf("%s: selector %v, want group=%s", where, m.Selector, group)
	}
}

package schema

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite json/*.json from avro/*.avsc")

// TestJSONSchemaGenerated keeps json/<topic>.json equal to what genJSONSchema
// derives from avro/<topic>.avsc. After changing an .avsc, run
//
//	go test ./schema -run TestJSONSchemaGenerated -update
func TestJSONSchemaGenerated(t *testing.T) {
	for _, topic := range Topics() {
		got, err := genJSONSchema(topic, contracts[topic].avro)
		if err != nil {
			t.Fatalf("%s: %v", topic, err)
		}
		path := filepath.Join("json", topic+".json")
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: regenerate it with go test ./schema -run TestJSONSchemaGenerated -update\n--- generated:\n%s", path, got)
		}
	}
}

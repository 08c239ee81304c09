package schema

import (
	"strings"
	"testing"
)

// A JSON event nested deeper than 32 levels, or with a member twice, is
// refused before it is decoded.
func TestParseJSONObjectBounded(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	if _, err := parseJSONObject([]byte(deep)); err == nil || !strings.Contains(err.Error(), "deeper than 32") {
		t.Errorf("deep event: %v, want refused as too deep", err)
	}
	if _, err := parseJSONObject([]byte(`{"orderId":"a","orderId":"b"}`)); err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("duplicate member: %v, want refused", err)
	}
	if _, err := parseJSONObject([]byte(`{"orderId":"a","lines":[{"q":1}]}`)); err != nil {
		t.Errorf("an event: %v", err)
	}
}

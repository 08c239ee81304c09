package checkout

import "testing"

// ClientKey undoes scopedKey for every caller, and leaves a guest's key,
// a server-issued key and anything else unscoped as it is.
func TestClientKeyUndoesScopedKey(t *testing.T) {
	for _, tc := range []struct{ customer, key string }{
		{"17850", "invoice-536365"}, {"", "invoice-536365"}, {"12583", "order:ord_1"},
	} {
		stored := scopedKey(principal{customer: tc.customer}, tc.key)
		if got := ClientKey(stored); got != tc.key {
			t.Errorf("ClientKey(scopedKey(%q, %q) = %q) = %q, want %q", tc.customer, tc.key, stored, got, tc.key)
		}
	}
}

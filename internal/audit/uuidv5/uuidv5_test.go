package uuidv5

import "testing"

// Ensure Of gives RFC 9562's own example (appendix A.4) and Python's
// uuid.uuid5 for the lab's namespace of case keys.
func TestOf(t *testing.T) {
	for _, tt := range []struct{ ns, name, want string }{
		{"6ba7b810-9dad-11d1-80b4-00c04fd430c8", "www.example.com", "2ed6657d-e927-568b-95e1-2665a8aea6a2"},
		{URL, "https://idemlab.invalid/case-key", "df95d02e-ddad-530e-9879-5513343fcae9"},
	} {
		if got := Of(tt.ns, tt.name); got != tt.want {
			t.Errorf("Of(%s, %q) = %s, want %s", tt.ns, tt.name, got, tt.want)
		}
	}
}

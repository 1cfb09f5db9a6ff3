package protocol

import (
	"strings"
	"testing"
)

// Ensure every typed name parses back to itself, and an unknown name is
// refused with an error that names it and lists every valid name.
func TestParseNames(t *testing.T) {
	type parser struct {
		what  string
		names []string
		parse func(string) (string, error)
	}
	strs := func(vs ...string) []string { return vs }
	tests := []parser{
		{"store", strs("volatile", "durable", "postgres"), func(s string) (string, error) { v, err := ParseStore(s); return string(v), err }},
		{"unsafe registry", strs("record-after-effect", "no-fingerprint", "evict-oldest", "forget-on-lost-reply", "record-before-effect", "check-then-act"), func(s string) (string, error) { v, err := ParseFlaw(s); return string(v), err }},
	}
	for _, tt := range tests {
		for _, name := range tt.names {
			if got, err := tt.parse(name); err != nil || got != name {
				t.Errorf("parse %s %q = %q, %v; want itself", tt.what, name, got, err)
			}
		}
		for _, bad := range []string{"", "nosuch", strings.ToUpper(tt.names[0])} {
			_, err := tt.parse(bad)
			if err == nil {
				t.Errorf("parse %s %q succeeded, want an error", tt.what, bad)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, "unknown "+tt.what+` "`+bad+`"`) || !strings.Contains(msg, strings.Join(tt.names, ", ")) {
				t.Errorf("parse %s %q error = %q, want it to name the input and list %v", tt.what, bad, msg, tt.names)
			}
		}
	}
}

package schemacheck

import (
	"errors"
	"strings"
	"testing"
)

// Ensure the real schemas compile and catch a violation with a stable,
// location-first message.
func TestValidate(t *testing.T) {
	set, err := Load("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, schema, doc, want string
	}{
		{"valid results", "results.schema.json", `{"schema_version":1,"runs":[]}`, ""},
		{"wrong type", "results.schema.json", `{"schema_version":1,"runs":[{"case":"a","store":"volatile","counter":"2","exit_codes":[],"calls":[]}]}`, "/runs/0/counter: expected integer, but got string"},
		{"unknown field", "results.schema.json", `{"schema_version":1,"runs":[],"extra":1}`, "additionalProperties 'extra' not allowed"},
		{"not json", "results.schema.json", `{`, "not JSON"},
		{"trailing data", "results.schema.json", `{"schema_version":1,"runs":[]} {}`, "data after the top-level value"},
		{"no reply carries no status", "results.schema.json", `{"schema_version":1,"runs":[{"case":"a","store":"volatile","counter":2,"exit_codes":[0],"calls":[{"step":0,"key":null,"fault":null,"outcome":"no_reply","status":200,"body":null,"replayed":null}]}]}`, "/runs/0/calls/0/status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := set.Validate(tt.schema, []byte(tt.doc))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("Validate = %v, want *Error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// Ensure an unknown schema name is an error, not a silent pass.
func TestValidateUnknownSchema(t *testing.T) {
	set, err := Load("../../schema")
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Validate("nosuch.schema.json", []byte(`{}`)); err == nil {
		t.Fatal("Validate(nosuch) = nil, want error")
	}
}

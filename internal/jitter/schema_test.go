package jitter

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

const schemaID = "https://idemlab.invalid/schema/jitter.schema.json"

// Ensure JSON() is valid against schema/jitter.schema.json.
func TestJSONMatchesSchema(t *testing.T) {
	data, err := os.ReadFile("../../schema/jitter.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaID, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(schemaID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(Default)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(r.JSON()))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("JSON() against the schema: %#v", err)
	}
}

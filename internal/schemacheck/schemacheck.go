// Package schemacheck validates the runner's JSON inputs and outputs (case
// files, evidence files) against the schemas in the checkout's schema/ folder,
// turning a validation failure into stable, sorted, one-line-per-problem text.
//
// The audit has its own validation code on purpose: it shares nothing with the
// runner.
package schemacheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"idemlab/internal/safefile"
)

// BaseURL is the absolute $id prefix every schema in schema/ declares.
const BaseURL = "https://idemlab.invalid/schema/"

// Set holds the compiled schemas of one schema folder, by file name
// (for example "case.schema.json").
type Set struct {
	schemas map[string]*jsonschema.Schema
}

// maxSchemaBytes bounds one schema file.
const maxSchemaBytes = 1 << 20

// Load compiles every *.schema.json file in dir, each a regular file.
func Load(dir string) (*Set, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.schema.json"))
	if err != nil {
		return nil, fmt.Errorf("list schemas in %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no *.schema.json in %s", dir)
	}
	c := jsonschema.NewCompiler()
	for _, p := range paths {
		b, err := safefile.Read(p, maxSchemaBytes)
		if err != nil {
			return nil, fmt.Errorf("read schema: %w", err)
		}
		if err := c.AddResource(BaseURL+filepath.Base(p), bytes.NewReader(b)); err != nil {
			return nil, fmt.Errorf("schema %s: %w", p, err)
		}
	}
	s := &Set{schemas: map[string]*jsonschema.Schema{}}
	for _, p := range paths {
		name := filepath.Base(p)
		sch, err := c.Compile(BaseURL + name)
		if err != nil {
			return nil, fmt.Errorf("compile schema %s: %w", p, err)
		}
		s.schemas[name] = sch
	}
	return s, nil
}

// Validate checks data against the named schema. A failure comes back as a
// *Error listing every leaf problem.
func (s *Set) Validate(schemaName string, data []byte) error {
	sch, ok := s.schemas[schemaName]
	if !ok {
		return fmt.Errorf("no schema %s", schemaName)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return &Error{Problems: []string{"not JSON: " + err.Error()}}
	}
	if d.More() {
		return &Error{Problems: []string{"not JSON: data after the top-level value"}}
	}
	err := sch.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return &Error{Problems: leaves(ve)}
	}
	return err
}

// Error is a schema violation: one line per leaf problem, sorted.
type Error struct {
	Problems []string
}

// Error joins the problems on one line.
func (e *Error) Error() string { return strings.Join(e.Problems, "; ") }

// leaves flattens a validation error tree into "location: message" lines,
// sorted, because the library's cause order follows map iteration.
func leaves(ve *jsonschema.ValidationError) []string {
	var out []string
	var walk func(*jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) == 0 {
			loc := v.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			out = append(out, loc+": "+v.Message)
			return
		}
		for _, c := range v.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(out)
	return dedupe(out)
}

func dedupe(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// SchemaBase is the absolute base URL of the schemas' $id.
const SchemaBase = "https://idemlab.invalid/schema/"

// Schemas holds the compiled schemas of schema/.
type Schemas struct {
	Case, Results, Manifest, Run *jsonschema.Schema
	Jitter, Retries              *jsonschema.Schema // the experiment files
}

// LoadSchemas compiles
// root/schema/{case,results,manifest,run,jitter,retries}.schema.json,
// each added under its $id URL; nothing is fetched from outside.
func LoadSchemas(root string) (*Schemas, error) {
	c := jsonschema.NewCompiler()
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("refusing to load %s: only schema/ is trusted", s)
	}
	names := []string{"case", "results", "manifest", "run", "jitter", "retries"}
	for _, n := range names {
		rel := "schema/" + n + ".schema.json"
		data, err := readInside(root, rel, CapSource)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, unwrapPath(err))
		}
		if err := c.AddResource(SchemaBase+n+".schema.json", bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
	}
	out := make([]*jsonschema.Schema, len(names))
	for i, n := range names {
		s, err := c.Compile(SchemaBase + n + ".schema.json")
		if err != nil {
			return nil, fmt.Errorf("schema/%s.schema.json: %w", n, err)
		}
		out[i] = s
	}
	return &Schemas{Case: out[0], Results: out[1], Manifest: out[2], Run: out[3], Jitter: out[4], Retries: out[5]}, nil
}

// maxSchemaLines bounds the lines validate returns; the rest are counted
// in one more line.
const maxSchemaLines = 100

// validate returns one "PATH: MESSAGE" line per leaf cause, sorted and
// deduplicated (a ValidationError prints only its first cause, and cause
// order follows map iteration), the first maxSchemaLines of them and then
// "N more schema failures". PATH is a JSON pointer, "(root)" for the
// whole document.
func validate(s *jsonschema.Schema, v any) []string {
	err := s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{"(root): " + err.Error()}
	}
	seen := map[string]bool{}
	var lines []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := e.InstanceLocation
			if loc == "" {
				loc = "(root)"
			}
			line := loc + ": " + e.Message
			if !seen[line] {
				seen[line] = true
				lines = append(lines, line)
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(lines)
	if len(lines) > maxSchemaLines {
		lines = append(lines[:maxSchemaLines:maxSchemaLines], fmt.Sprintf("%d more schema failures", len(lines)-maxSchemaLines))
	}
	return lines
}

// unwrapPath drops the path of an *os.PathError, for messages that name
// the file themselves.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// manifestSchema validates the already-decoded manifest.
func (a *auditor) manifestSchema(v any) {
	a.check()
	for _, l := range validate(a.schemas.Manifest, v) {
		a.failf(CheckSchema, "manifest.json: %s", l)
	}
}

// evidenceSchemas validates results.json and run.json and returns the
// decoded results when they are valid, nil otherwise.
func (a *auditor) evidenceSchemas() map[string]any {
	results, _ := a.jsonDoc("results.json", a.schemas.Results).(map[string]any) // its bytes: read again by the statement checks
	a.runDoc, _ = a.jsonDoc("run.json", a.schemas.Run).(map[string]any)
	a.release("run.json")
	return results
}

// jsonDoc decodes (strictly) and validates an evidence file read by
// checkFiles; nil when it is missing, not JSON or invalid (each a schema
// failure).
func (a *auditor) jsonDoc(name string, s *jsonschema.Schema) any {
	a.check()
	data, ok := a.evidenceFile(name)
	if !ok {
		return nil // not listed, or unreadable: a file failure says which
	}
	v, err := decodeJSON(data, valueCaps[name])
	if err != nil {
		a.failf(CheckSchema, "%s: %s", name, jsonRefusal(err))
		return nil
	}
	lines := validate(s, v)
	for _, l := range lines {
		a.failf(CheckSchema, "%s: %s", name, l)
	}
	if len(lines) > 0 {
		return nil
	}
	return v
}

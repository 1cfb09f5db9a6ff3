package audit

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"idemlab/internal/audit/digest"
	"idemlab/internal/audit/strict"
)

// SchemaBase is the absolute base URL of the schemas' $id.
const SchemaBase = strict.SchemaBase

// Schemas holds the compiled schemas of schema/ the audit reads with.
type Schemas struct {
	Case, Results, Manifest, Run *jsonschema.Schema
	Jitter, Retries              *jsonschema.Schema // the experiment files
	Targets, Target              *jsonschema.Schema // targets.json, and each target.json it holds
	Chaos                        *jsonschema.Schema
}

// LoadSchemas compiles root/schema/*.schema.json, each a regular file added
// under its $id URL; nothing is fetched from outside.
func LoadSchemas(root string) (*Schemas, error) {
	dir := filepath.Join(root, "schema")
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("schema/case.schema.json: %w", syscall.ENOENT) // not a checkout
	}
	set, err := strict.LoadSchemas(dir)
	if err != nil {
		return nil, err
	}
	s := &Schemas{}
	for _, x := range []struct {
		name string
		to   **jsonschema.Schema
	}{{"case", &s.Case}, {"results", &s.Results}, {"manifest", &s.Manifest}, {"run", &s.Run},
		{"jitter", &s.Jitter}, {"retries", &s.Retries}, {"targets", &s.Targets}, {"target", &s.Target}, {"chaos", &s.Chaos}} {
		if *x.to = set.Schema(x.name + ".schema.json"); *x.to == nil {
			return nil, fmt.Errorf("schema/%s.schema.json: %w", x.name, syscall.ENOENT)
		}
	}
	return s, nil
}

// validate returns a "PATH: MESSAGE" line per problem (strict.Validate).
func validate(s *jsonschema.Schema, v any) []string { return strict.Validate(s, v) }

// unwrapPath drops the path of an *os.PathError, for messages that name
// the file themselves.
func unwrapPath(err error) error { return digest.UnwrapPath(err) }

// jsonDoc decodes and validates a kept evidence file; nil when it is
// missing, not JSON or invalid (each a schema failure).
func (a *auditor) jsonDoc(name string, s *jsonschema.Schema) any {
	a.check()
	data, ok := a.evidenceFile(name)
	if !ok {
		return nil // not listed, or unreadable: a file failure says which
	}
	v, err := decodeJSON(data, jsonCaps[name])
	if err != nil {
		a.failf(CheckSchema, "%s: %s", name, jsonRefusal(err))
		return nil
	}
	lines := validated.lines(s, data, v)
	for _, l := range lines {
		a.failf(CheckSchema, "%s: %s", name, l)
	}
	if len(lines) > 0 {
		return nil
	}
	return v
}

// validated remembers the problems of documents already validated, by
// schema and bytes: a process that audits many folders (the tests, the
// byte-flip sweep) validates each unchanged file once. The schema is
// held by the key, so its address names it while it is remembered.
var validated validations

// maxValidations bounds the remembered documents; past it all are dropped.
const maxValidations = 4096

type validations struct {
	mu   sync.Mutex
	seen map[validationKey][]string
}

type validationKey struct {
	schema *jsonschema.Schema
	sum    [sha256.Size]byte
}

// lines returns validate(s, v) for v decoded from data.
func (m *validations) lines(s *jsonschema.Schema, data []byte, v any) []string {
	k := validationKey{s, sha256.Sum256(data)}
	m.mu.Lock()
	lines, ok := m.seen[k]
	m.mu.Unlock()
	if ok {
		return lines
	}
	lines = validate(s, v)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil || len(m.seen) >= maxValidations {
		m.seen = map[validationKey][]string{}
	}
	m.seen[k] = lines
	return lines
}

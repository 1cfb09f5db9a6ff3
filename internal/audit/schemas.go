package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// SchemaBase is the absolute base URL of the schemas' $id.
const SchemaBase = "https://idemlab.invalid/schema/"

// Schemas holds the compiled schemas of schema/.
type Schemas struct {
	Case, Results, Manifest, Run *jsonschema.Schema
	Jitter, Retries              *jsonschema.Schema // the experiment files
	Targets, Target              *jsonschema.Schema // targets.json, and each target.json it holds
}

// LoadSchemas compiles
// root/schema/{case,results,manifest,run,jitter,retries,targets,target}.schema.json,
// each added under its $id URL; nothing is fetched from outside.
func LoadSchemas(root string) (*Schemas, error) {
	c := jsonschema.NewCompiler()
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("refusing to load %s: only schema/ is trusted", s)
	}
	names := []string{"case", "results", "manifest", "run", "jitter", "retries", "targets", "target"}
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
	return &Schemas{Case: out[0], Results: out[1], Manifest: out[2], Run: out[3], Jitter: out[4], Retries: out[5],
		Targets: out[6], Target: out[7]}, nil
}

// maxSchemaLines bounds the lines validate returns; the rest are counted
// in one more line.
const maxSchemaLines = 100

// validate returns one "PATH: MESSAGE" line per leaf cause, sorted and
// deduplicated (a ValidationError prints only its first cause, and cause
// order follows map iteration), the first maxSchemaLines of them and then
// "N more schema failures". PATH is a JSON pointer, "(root)" for the
// whole document.
//
// The validator builds every failure of what it is given before it
// returns (about 530 bytes each), so validate gives it a document in
// parts where the schema allows (validateParts): a results.json of
// 400,000 invalid elements then costs one element's failures at a time,
// not 210 MB.
func validate(s *jsonschema.Schema, v any) []string {
	var c schemaLines
	validateParts(s, v, "", &c)
	return c.result()
}

// validateParts adds to c the leaves of validating v, at JSON pointer loc,
// against s, as s.Validate gives them. Where s gives the elements of an
// array one schema and says nothing else of it (besides its type), each
// element is validated on its own; where s is an object schema whose
// keywords weigh each member on its own (properties, required,
// additionalProperties: no allOf, dependencies and the like), the object
// is validated with such arrays emptied and their elements then each on
// its own. Anything else is validated whole.
func validateParts(s *jsonschema.Schema, v any, loc string, c *schemaLines) {
	s = throughRef(s)
	switch v := v.(type) {
	case []any:
		if items := itemsOnly(s); items != nil {
			for i, e := range v {
				validateParts(items, e, loc+"/"+strconv.Itoa(i), c)
			}
			return
		}
	case map[string]any:
		if whole, arrays := splitObject(s, v); arrays != nil {
			c.add(leaves(s, whole, loc))
			for _, name := range sortedKeys(arrays) {
				validateParts(arrays[name], v[name], loc+"/"+pointerToken(name), c)
			}
			return
		}
	}
	c.add(leaves(s, v, loc))
}

// leaves validates v, at loc, against s and returns its distinct leaf
// lines.
func leaves(s *jsonschema.Schema, v any, loc string) []string {
	at := func(instance string) string {
		if loc+instance == "" {
			return "(root)"
		}
		return loc + instance
	}
	err := s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{at("") + ": " + err.Error()}
	}
	seen := map[string]bool{}
	var lines []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			line := at(e.InstanceLocation) + ": " + sortedNames(e.Message)
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
	return lines
}

// quotedList matches the list of quoted names a schema message holds
// ("additionalProperties 'a', 'b' not allowed", "missing properties: 'a',
// 'b'"), which the validator builds in map order.
var quotedList = regexp.MustCompile(`'[^']*'(, '[^']*')+`)

// sortedNames sorts the names of every quoted list in msg, so that one
// document gives one message.
func sortedNames(msg string) string {
	return quotedList.ReplaceAllStringFunc(msg, func(list string) string {
		names := strings.Split(list, ", ")
		sort.Strings(names)
		return strings.Join(names, ", ")
	})
}

// schemaLines gathers the leaf lines of a document's parts: no two parts
// share a line (each is a subtree of its own, or an object without them),
// so the count is the parts' counts summed; it keeps the first
// maxSchemaLines in sort order.
type schemaLines struct {
	n     int
	first []string // the smallest lines so far, at most 2·maxSchemaLines
}

func (c *schemaLines) add(lines []string) {
	c.n += len(lines)
	c.first = append(c.first, lines...)
	if len(c.first) > 2*maxSchemaLines {
		sort.Strings(c.first)
		clear(c.first[maxSchemaLines:])
		c.first = c.first[:maxSchemaLines]
	}
}

func (c *schemaLines) result() []string {
	if c.n == 0 {
		return nil
	}
	sort.Strings(c.first)
	lines := c.first[:min(len(c.first), maxSchemaLines)]
	if c.n > maxSchemaLines {
		lines = append(lines[:maxSchemaLines:maxSchemaLines], fmt.Sprintf("%d more schema failures", c.n-maxSchemaLines))
	}
	return lines
}

// throughRef follows s while it is only a $ref.
func throughRef(s *jsonschema.Schema) *jsonschema.Schema {
	for s.Ref != nil && onlyRef(s) {
		s = s.Ref
	}
	return s
}

// plain reports whether s has no keyword that judges a value as a whole
// beyond its type and its own object or array keywords, nor one that
// needs the schemas around it (draft 2019-09 and later's dynamic scope).
func plain(s *jsonschema.Schema) bool {
	return s.Always == nil && s.Ref == nil && s.RecursiveRef == nil && s.DynamicRef == nil && !s.RecursiveAnchor && s.DynamicAnchor == "" &&
		s.Constant == nil && s.Enum == nil && s.Not == nil && s.AllOf == nil && s.AnyOf == nil && s.OneOf == nil && s.If == nil &&
		s.Format == "" && len(s.Extensions) == 0 && slices.Contains([]*jsonschema.Draft{jsonschema.Draft4, jsonschema.Draft6, jsonschema.Draft7}, s.Draft)
}

// onlyRef reports whether s, which has a $ref, has no other keyword.
func onlyRef(s *jsonschema.Schema) bool {
	r := *s
	r.Ref = nil
	return plain(&r) && r.Types == nil && r.Required == nil && r.Properties == nil && r.PropertyNames == nil &&
		r.PatternProperties == nil && r.AdditionalProperties == nil && r.Dependencies == nil && r.DependentRequired == nil &&
		r.DependentSchemas == nil && r.UnevaluatedProperties == nil && r.MinProperties == -1 && r.MaxProperties == -1 &&
		r.Items == nil && r.MinItems == -1 && r.MaxItems == -1 && !r.UniqueItems &&
		r.MinLength == -1 && r.MaxLength == -1 && r.Pattern == nil && r.ContentEncoding == "" && r.ContentMediaType == "" &&
		r.ContentSchema == nil && r.Minimum == nil && r.ExclusiveMinimum == nil && r.Maximum == nil && r.ExclusiveMaximum == nil &&
		r.MultipleOf == nil
}

// itemsOnly returns the schema s gives every element of an array, when s
// says nothing else of an array but that its type may be one.
func itemsOnly(s *jsonschema.Schema) *jsonschema.Schema {
	items, _ := s.Items.(*jsonschema.Schema)
	if items == nil || !plain(s) || s.Types != nil && !slices.Contains(s.Types, "array") || s.MinItems != -1 || s.MaxItems != -1 ||
		s.UniqueItems || s.AdditionalItems != nil || s.PrefixItems != nil || s.Items2020 != nil || s.Contains != nil || s.UnevaluatedItems != nil {
		return nil
	}
	return items
}

// splitObject returns obj with its members that are arrays of an
// itemsOnly schema emptied, and those members' schemas, when s judges
// each member on its own; nil arrays when it does not, or none is such.
func splitObject(s *jsonschema.Schema, obj map[string]any) (whole map[string]any, arrays map[string]*jsonschema.Schema) {
	if !plain(s) || s.Types != nil && !slices.Contains(s.Types, "object") || s.Dependencies != nil || s.DependentSchemas != nil || s.UnevaluatedProperties != nil {
		return nil, nil
	}
	for name, v := range obj {
		ps := s.Properties[name]
		if _, isArray := v.([]any); !isArray || ps == nil || itemsOnly(throughRef(ps)) == nil || matchesPattern(s, name) {
			continue
		}
		if arrays == nil {
			arrays, whole = map[string]*jsonschema.Schema{}, maps.Clone(obj)
		}
		arrays[name], whole[name] = throughRef(ps), []any{}
	}
	return whole, arrays
}

func matchesPattern(s *jsonschema.Schema, name string) bool {
	for re := range s.PatternProperties {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// pointerToken is name as the validator writes it in an instance
// location: a JSON pointer token ("~" as "~0", "/" as "~1"), path-escaped.
func pointerToken(name string) string {
	return url.PathEscape(strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1"))
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
	v, err := decodeJSON(data, jsonCaps[name])
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

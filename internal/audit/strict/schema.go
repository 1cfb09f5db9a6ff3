package strict

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// SchemaBase is the absolute base URL of the schemas' $id: each schema is
// added under it, so that a cross-schema $ref resolves and no message
// names a path of the machine.
const SchemaBase = "https://idemlab.invalid/schema/"

// MaxSchemaFile bounds one schema file.
const MaxSchemaFile = 4 << 20

// Schemas are the compiled schemas of one schema folder, by file name
// ("case.schema.json").
type Schemas struct {
	byName map[string]*jsonschema.Schema
}

// LoadSchemas compiles every *.schema.json of dir, each a regular file
// (never a symlink) of at most MaxSchemaFile bytes, added under its $id
// URL; nothing is fetched from outside the folder. Compiled sets are kept
// by their files' names and bytes (compiling checks each schema against
// its draft's meta-schema, about 16 ms a set): a process that audits many
// folders, as the tests do, compiles each distinct set once. A compiled
// schema is read-only, so one set serves every caller.
func LoadSchemas(dir string) (*Schemas, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.schema.json"))
	if err != nil {
		return nil, fmt.Errorf("list schemas in %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no *.schema.json (run from the idemlab checkout)", dir)
	}
	files := make([][]byte, len(paths))
	key := sha256.New()
	for i, p := range paths {
		if files[i], err = ReadFile(p, MaxSchemaFile); err != nil {
			return nil, err
		}
		fmt.Fprintf(key, "%s %d\n", filepath.Base(p), len(files[i]))
		key.Write(files[i])
	}
	k := [sha256.Size]byte(key.Sum(nil))
	if s := compiled.get(k); s != nil {
		return s, nil
	}
	s, err := compileSchemas(paths, files)
	if err != nil {
		return nil, err
	}
	compiled.put(k, s)
	return s, nil
}

// compileSchemas compiles files, read from paths, as one set.
func compileSchemas(paths []string, files [][]byte) (*Schemas, error) {
	c := jsonschema.NewCompiler()
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("refusing to load %s: only schema/ is trusted", s)
	}
	for i, p := range paths {
		if err := c.AddResource(SchemaBase+filepath.Base(p), bytes.NewReader(files[i])); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	s := &Schemas{byName: map[string]*jsonschema.Schema{}}
	for _, p := range paths {
		name := filepath.Base(p)
		var err error
		if s.byName[name], err = c.Compile(SchemaBase + name); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return s, nil
}

// maxCompiledSets bounds the kept sets; past it the oldest is dropped.
const maxCompiledSets = 8

// compiled holds the sets compiled so far in this process.
var compiled schemaCache

type schemaCache struct {
	mu    sync.Mutex
	order [][sha256.Size]byte
	sets  map[[sha256.Size]byte]*Schemas
}

func (c *schemaCache) get(k [sha256.Size]byte) *Schemas {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sets[k]
}

func (c *schemaCache) put(k [sha256.Size]byte, s *Schemas) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sets == nil {
		c.sets = map[[sha256.Size]byte]*Schemas{}
	}
	if _, ok := c.sets[k]; ok {
		return
	}
	if len(c.order) == maxCompiledSets {
		delete(c.sets, c.order[0])
		c.order = c.order[1:]
	}
	c.order = append(c.order, k)
	c.sets[k] = s
}

// Schema returns the compiled schema of file name ("case.schema.json"),
// nil when the folder has none.
func (s *Schemas) Schema(name string) *jsonschema.Schema { return s.byName[name] }

// An Error is a document that is not strict JSON, or that breaks its
// schema: one line per problem, sorted.
type Error struct {
	Problems []string
	syntax   error // the *SyntaxError, when the document is not strict JSON
}

// Error joins the problems on one line.
func (e *Error) Error() string { return strings.Join(e.Problems, "; ") }

func (e *Error) Unwrap() error { return e.syntax }

// Problem is err's text for the person who wrote data: a syntax error
// placed at its line and column.
func Problem(data []byte, err error) string {
	if se, ok := errors.AsType[*SyntaxError](err); ok {
		return Where(data, se.Offset) + ": " + Refusal(se)
	}
	return err.Error()
}

// Check decodes data strictly within caps and validates it against the
// schema of file name; a refusal is an *Error.
func (s *Schemas) Check(name string, data []byte, caps Caps) (any, error) {
	sch := s.Schema(name)
	if sch == nil {
		return nil, fmt.Errorf("no schema %s", name)
	}
	v, err := Decode(data, caps)
	if err != nil {
		return nil, &Error{Problems: []string{Refusal(err)}, syntax: err}
	}
	if lines := Validate(sch, v); len(lines) > 0 {
		return nil, &Error{Problems: lines}
	}
	return v, nil
}

// ReadFile reads the regular file at path, refusing a symlink or anything
// but a regular file and a file over limit bytes, without reading more
// than limit+1 bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return nil, err
	case fi.Mode()&os.ModeSymlink != 0:
		return nil, fmt.Errorf("%s: a symbolic link (refused: only regular files are read)", path)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s: not a regular file", path)
	case fi.Size() > limit:
		return nil, fmt.Errorf("%s: %d bytes, over the cap of %d bytes", path, fi.Size(), limit)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("%s: over the cap of %d bytes", path, limit)
	}
	return data, err
}

// MaxSchemaLines bounds the lines validate returns; the rest are counted
// in one more line.
const MaxSchemaLines = 100

// Validate returns one "PATH: MESSAGE" line per leaf cause, sorted and
// deduplicated (a ValidationError prints only its first cause, and cause
// order follows map iteration), the first MaxSchemaLines of them and then
// "N more schema failures". PATH is a JSON pointer, "(root)" for the
// whole document.
//
// The validator builds every failure of what it is given before it
// returns (about 530 bytes each), so Validate gives it a document in
// parts where the schema allows (validateParts): a results.json of
// 400,000 invalid elements then costs one element's failures at a time,
// not 210 MB.
func Validate(s *jsonschema.Schema, v any) []string {
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
			for _, name := range slices.Sorted(maps.Keys(arrays)) {
				validateParts(arrays[name], v[name], loc+"/"+pointerToken(name), c)
			}
			return
		}
	}
	c.add(leaves(s, v, loc))
}

// leaves validates v, at loc, against s and returns its distinct leaf
// lines, sorted.
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
	var lines []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			lines = append(lines, at(e.InstanceLocation)+": "+sortedNames(e.Message))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.Sort(lines)
	return slices.Compact(lines)
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
		slices.Sort(names)
		return strings.Join(names, ", ")
	})
}

// schemaLines gathers the leaf lines of a document's parts: no two parts
// share a line (each is a subtree of its own, or an object without them),
// so the count is the parts' counts summed; it keeps the first
// MaxSchemaLines in sort order.
type schemaLines struct {
	n     int
	first []string // the smallest lines so far, at most 2·MaxSchemaLines
}

func (c *schemaLines) add(lines []string) {
	c.n += len(lines)
	c.first = append(c.first, lines...)
	if len(c.first) > 2*MaxSchemaLines {
		slices.Sort(c.first)
		clear(c.first[MaxSchemaLines:])
		c.first = c.first[:MaxSchemaLines]
	}
}

func (c *schemaLines) result() []string {
	if c.n == 0 {
		return nil
	}
	slices.Sort(c.first)
	lines := c.first[:min(len(c.first), MaxSchemaLines)]
	if c.n > MaxSchemaLines {
		lines = append(lines[:MaxSchemaLines:MaxSchemaLines], fmt.Sprintf("%d more schema failures", c.n-MaxSchemaLines))
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

package audit

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// render prints a decoded JSON value canonically (object keys sorted, no
// spaces, integers without exponent), so equal values render equally.
func render(v any) string {
	var b strings.Builder
	renderTo(&b, v)
	return b.String()
}

func renderTo(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case json.Number:
		if i, err := v.Int64(); err == nil {
			b.WriteString(strconv.FormatInt(i, 10))
		} else {
			b.WriteString(v.String())
		}
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			renderTo(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		b.WriteByte('{')
		for i, k := range sortedKeys(v) {
			if i > 0 {
				b.WriteByte(',')
			}
			renderTo(b, k)
			b.WriteByte(':')
			renderTo(b, v[k])
		}
		b.WriteByte('}')
	default:
		q, _ := json.Marshal(v)
		b.Write(q)
	}
}

func str(m map[string]any, key string) (string, bool) {
	s, ok := m[key].(string)
	return s, ok
}

// stringMap returns m[key] as a map of strings, dropping non-string values.
func stringMap(m map[string]any, key string) map[string]string {
	obj, _ := m[key].(map[string]any)
	out := make(map[string]string, len(obj))
	for k, v := range obj {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// stringList returns m[key] as a list of strings, dropping non-strings.
func stringList(m map[string]any, key string) []string {
	arr, _ := m[key].([]any)
	out := []string{}
	for _, v := range arr {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }

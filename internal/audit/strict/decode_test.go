package strict

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// Ensure the strict reader refuses what a lenient one would read two ways
// (duplicate names, invalid UTF-8, trailing data) and reads the rest as
// encoding/json does.
func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		name, in string
		err      string // "" for success
	}{
		{"object", `{"a": [1, 2.5, "x", true, null], "b": {}}`, ""},
		{"trailing white space", "{}\n\t ", ""},
		{"duplicate at the top", `{"a": 1, "a": 1}`, `duplicate member name "a"`},
		{"duplicate deep inside", `{"a": [{"b": {"c": 1, "c": 2}}]}`, `duplicate member name "c"`},
		{"duplicate spelled with an escape", `{"a": 1, "\u0061": 2}`, `duplicate member name "a"`},
		{"invalid UTF-8 in a string", "{\"a\": \"\xff\"}", "invalid UTF-8 at byte 7"},
		{"invalid UTF-8 in white space", "{} \xc3", "invalid UTF-8 at byte 3"},
		{"trailing value", `{} {}`, "unexpected data after the JSON value"},
		{"trailing garbage", `{}x`, "unexpected data after the JSON value"},
		{"truncated", `{"a": [1,`, "unexpected EOF"},
		{"empty", ``, "EOF"},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), "nested deeper than"},
		{"deep enough", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Decode([]byte(tt.in), Caps{400_000, 100_000})
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Decode(%q) error = %v, want nil", tt.in, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Decode(%q) = %v, %v, want an error containing %q", tt.in, v, err, tt.err)
			}
		})
	}
}

// Ensure a document is refused at its first value, or object, over its
// caps, before any error further on, and read whole at the caps.
func TestDecodeJSONCaps(t *testing.T) {
	for _, tt := range []struct {
		in   string
		caps Caps
		err  string // "" for success
	}{
		{`{"a": [1, "x", {"b": null}], "c": true}`, Caps{7, 2}, ""},
		{`{"a": [1, "x", {"b": null}], "c": true}`, Caps{6, 2}, "over the cap of 6 JSON values"},
		{`{"a": [1, "x", {"b": null}], "c": true}`, Caps{7, 1}, "over the cap of 1 JSON objects"},
		{`[1, 2, 3, x]`, Caps{3, 1}, "over the cap of 3 JSON values"},
		{`[1, 2, 3, x]`, Caps{5, 1}, "invalid character 'x'"},
		{`[[], {}, ""]`, Caps{4, 1}, ""},
		{`[[], {}, ""]`, Caps{3, 1}, "over the cap of 3 JSON values"},
		{`[{}, {}, x]`, Caps{9, 1}, "over the cap of 1 JSON objects"},
	} {
		v, err := Decode([]byte(tt.in), tt.caps)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("Decode(%q, %v) error = %v, want nil", tt.in, tt.caps, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Decode(%q, %v) = %v, %v, want an error containing %q", tt.in, tt.caps, v, err, tt.err)
		}
	}
}

// Ensure the strict reader never panics, that whatever it accepts
// encoding/json reads to the same value, and that it refuses a document
// encoding/json reads only for a duplicate name or too deep a nesting.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,"x",null,true,{"b":[]}]`, `{"a":1,"a":2}`, "\"\xff\"", `{} {}`, `1e400`, `"\ud800"`, `-0.5e+3`, `"a\\\"b"`, `01`, `[1,]`, `tru`, "\"\t\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data, Caps{len(data), len(data)}) // a value takes a byte at least: never over the caps
		if err != nil {
			if json.Valid(data) && utf8.Valid(data) && !strings.Contains(err.Error(), "duplicate member name") && !strings.Contains(err.Error(), "nested deeper") {
				t.Fatalf("Decode(%q) error = %v, but encoding/json reads it", data, err)
			}
			return
		}
		var w any
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.UseNumber()
		if err := dec.Decode(&w); err != nil {
			t.Fatalf("decodeJSON accepted %q, encoding/json refuses it: %v", data, err)
		}
		if render(v) != render(w) {
			t.Fatalf("Decode(%q) = %s, encoding/json reads %s", data, render(v), render(w))
		}
	})
}

// render is v as canonical JSON (sorted members), for comparisons.
func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}

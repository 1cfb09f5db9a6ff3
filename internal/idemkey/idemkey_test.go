package idemkey

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

var parseTests = []struct {
	in   string
	want string
	err  error
}{
	{in: "abc-1", want: "abc-1"},
	{in: `"abc-1"`, want: "abc-1"},
	{in: "a", want: "a"},
	{in: "A_b-9", want: "A_b-9"},
	{in: strings.Repeat("k", 64), want: strings.Repeat("k", 64)},
	{in: `"` + strings.Repeat("k", 64) + `"`, want: strings.Repeat("k", 64)},
	{in: "", err: ErrEmpty},
	{in: `""`, err: ErrEmpty},
	{in: strings.Repeat("k", 65), err: ErrTooLong},
	{in: `"` + strings.Repeat("k", 65) + `"`, err: ErrTooLong},
	{in: "bad key", err: ErrBadChar},
	{in: " abc", err: ErrBadChar},
	{in: "abc\t", err: ErrBadChar},
	{in: "a.b", err: ErrBadChar},
	{in: "a,b", err: ErrBadChar},
	{in: "a;b=1", err: ErrBadChar},
	{in: "ключ", err: ErrBadChar},
	{in: `"abc`, err: ErrQuote},
	{in: `abc"`, err: ErrQuote},
	{in: `"`, err: ErrQuote},
	{in: `"a"b"`, err: ErrQuote},
	{in: `"abc";p=1`, err: ErrQuote},
	{in: `"a\"b"`, err: ErrQuote},
	{in: `"a\\b"`, err: ErrBadChar},
}

// Ensure Parse accepts exactly the bare and quoted token spellings.
func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		got, err := Parse(tt.in)
		if !errors.Is(err, tt.err) {
			t.Errorf("Parse(%q) error = %v, want %v", tt.in, err, tt.err)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Ensure FromHeader treats an absent header as no key and several lines as an error.
func TestFromHeader(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want string
		err  error
	}{
		{name: "absent", h: http.Header{}},
		{name: "bare", h: http.Header{"Idempotency-Key": {"k1"}}, want: "k1"},
		{name: "quoted", h: http.Header{"Idempotency-Key": {`"k1"`}}, want: "k1"},
		{name: "empty", h: http.Header{"Idempotency-Key": {""}}, err: ErrEmpty},
		{name: "two lines", h: http.Header{"Idempotency-Key": {"k1", "k1"}}, err: ErrMultiple},
	}
	for _, tt := range tests {
		got, err := FromHeader(tt.h)
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: FromHeader error = %v, want %v", tt.name, err, tt.err)
			continue
		}
		if got != tt.want {
			t.Errorf("%s: FromHeader = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// Ensure every accepted key is a token, and quoting it names the same key.
func FuzzParse(f *testing.F) {
	for _, tt := range parseTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := Parse(in)
		if err != nil {
			return
		}
		if !tokenPattern.MatchString(key) {
			t.Fatalf("Parse(%q) = %q, which is not a token", in, key)
		}
		if got, err := Parse(`"` + key + `"`); err != nil || got != key {
			t.Fatalf("Parse(%q) = %q, %v, want %q, nil", `"`+key+`"`, got, err, key)
		}
		if got, err := Parse(key); err != nil || got != key {
			t.Fatalf("Parse(%q) = %q, %v, want %q, nil", key, got, err, key)
		}
	})
}

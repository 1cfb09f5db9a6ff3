package protocol

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var tokenPattern = regexp.MustCompile("^" + KeyPattern + "$")

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
	{in: "", err: ErrKeyEmpty},
	{in: `""`, err: ErrKeyEmpty},
	{in: strings.Repeat("k", 65), err: ErrKeyTooLong},
	{in: `"` + strings.Repeat("k", 65) + `"`, err: ErrKeyTooLong},
	{in: "bad key", err: ErrKeyBadChar},
	{in: " abc", err: ErrKeyBadChar},
	{in: "abc\t", err: ErrKeyBadChar},
	{in: "a.b", err: ErrKeyBadChar},
	{in: "a,b", err: ErrKeyBadChar},
	{in: "a;b=1", err: ErrKeyBadChar},
	{in: "ключ", err: ErrKeyBadChar},
	{in: `"abc`, err: ErrKeyQuote},
	{in: `abc"`, err: ErrKeyQuote},
	{in: `"`, err: ErrKeyQuote},
	{in: `"a"b"`, err: ErrKeyQuote},
	{in: `"abc";p=1`, err: ErrKeyQuote},
	{in: `"a\"b"`, err: ErrKeyQuote},
	{in: `"a\\b"`, err: ErrKeyBadChar},
}

// Ensure ParseKey accepts exactly the bare and quoted token spellings, and
// KeyFromHeader answers the same for a header of that one line.
func TestParseKey(t *testing.T) {
	fromHeader := func(v string) (string, error) { return KeyFromHeader(http.Header{KeyHeader: {v}}) }
	for _, tt := range parseTests {
		for name, parse := range map[string]func(string) (string, error){"ParseKey": ParseKey, "KeyFromHeader": fromHeader} {
			if got, err := parse(tt.in); !errors.Is(err, tt.err) || got != tt.want {
				t.Errorf("%s(%q) = %q, %v; want %q, %v", name, tt.in, got, err, tt.want, tt.err)
			}
		}
	}
}

// Ensure KeyFromHeader treats an absent header as no key and several
// lines, even agreeing, as an error.
func TestKeyFromHeaderLines(t *testing.T) {
	if got, err := KeyFromHeader(http.Header{}); got != "" || err != nil {
		t.Errorf("KeyFromHeader(absent) = %q, %v; want no key", got, err)
	}
	if _, err := KeyFromHeader(http.Header{KeyHeader: {"k1", "k1"}}); !errors.Is(err, ErrKeyMultiple) {
		t.Errorf("KeyFromHeader(two lines) error = %v, want %v", err, ErrKeyMultiple)
	}
}

// Ensure every accepted key is a token, and quoting it names the same key.
func FuzzParseKey(f *testing.F) {
	for _, tt := range parseTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := ParseKey(in)
		if err != nil {
			return
		}
		if !tokenPattern.MatchString(key) {
			t.Fatalf("ParseKey(%q) = %q, which is not a token", in, key)
		}
		if got, err := ParseKey(`"` + key + `"`); err != nil || got != key {
			t.Fatalf("ParseKey(%q) = %q, %v, want %q, nil", `"`+key+`"`, got, err, key)
		}
		if got, err := ParseKey(key); err != nil || got != key {
			t.Fatalf("ParseKey(%q) = %q, %v, want %q, nil", key, got, err, key)
		}
	})
}

// Ensure IsFieldName takes the tokens RFC 9110 allows and nothing else.
func TestIsFieldName(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"Idempotency-Key", true}, {"X-Lab_Fault.v2", true}, {"!#$%&'*+-.^_`|~", true},
		{"", false}, {"Idempotency Key", false}, {"Key:", false}, {"K\x00", false}, {"Ké", false}, {"(k)", false}, {"k\x7f", false},
	} {
		if got := IsFieldName(tc.s); got != tc.want {
			t.Errorf("IsFieldName(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

package target

import (
	"strings"
	"testing"
)

// Ensure the sink reads a forwarded key from the request's key header
// unless effects names another, and a count target has none.
func TestEffectsKeyHeader(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		want           Effects
	}{
		{"sink", "", "", Effects{Sink: true, KeyHeader: "Idempotency-Key"}},
		{"sink with the request's own header", `"key_header": "Idempotency-Key"`, `"key_header": "X-Idempotency-Key"`, Effects{Sink: true, KeyHeader: "X-Idempotency-Key"}},
		{"sink naming the forwarded header", `"effects": "sink"`, `"effects": {"sink": {"key_header": "X-Request-Key"}}`, Effects{Sink: true, KeyHeader: "X-Request-Key"}},
		{"sink naming none", `"effects": "sink"`, `"effects": {"sink": {}}`, Effects{Sink: true, KeyHeader: "Idempotency-Key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := loadMinimal(t, func(s string) string { return strings.Replace(s, tc.old, tc.new, 1) })
			if got := tg.Effects; got.Sink != tc.want.Sink || got.KeyHeader != tc.want.KeyHeader || len(got.Count) > 0 {
				t.Fatalf("Effects = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Ensure target.json's new fields are refused, naming the field, past
// their bounds, and {effect_url} is refused wherever the target has no
// sink: it would expand to nothing.
func TestParseSinkKeysAndClaims(t *testing.T) {
	set := schemas(t)
	noSink := func(s string) string {
		return strings.Replace(s, `"effects": "sink"`, `"effects": {"count": ["cat", "{state}/n"]}`, 1)
	}
	for _, tc := range []struct {
		name string
		edit func(string) string
		want string
	}{
		{"effect_url in env without a sink", noSink, `start.env.EFFECT_URL: {effect_url} is the effect sink's URL, and the target has no sink`},
		{"effect_url in argv without a sink", func(s string) string {
			return noSink(strings.Replace(strings.Replace(s, `"EFFECT_URL": "{effect_url}", `, "", 1), `"{port}"]`, `"{port}", "--sink={effect_url}"]`, 1))
		}, `start.argv[3]: {effect_url} is the effect sink's URL`},
		{"effect_url in the count command", func(s string) string {
			return strings.Replace(strings.Replace(s, `"EFFECT_URL": "{effect_url}", `, "", 1), `"effects": "sink"`, `"effects": {"count": ["curl", "{effect_url}"]}`, 1)
		}, `effects.count[1]: {effect_url} is the effect sink's URL`},
		{"sink and count at once", func(s string) string {
			return strings.Replace(s, `"effects": "sink"`, `"effects": {"sink": {}, "count": ["cat"]}`, 1)
		}, "/effects"},
		{"a forwarded key header that is no header name", func(s string) string {
			return strings.Replace(s, `"effects": "sink"`, `"effects": {"sink": {"key_header": "X Key"}}`, 1)
		}, "/effects"},
		{"an unknown key format", func(s string) string {
			return strings.Replace(s, `"key_header": "Idempotency-Key"`, `"key_header": "Idempotency-Key", "key_format": "ulid"`, 1)
		}, "/request/key_format"},
		{"a key TTL of 0", func(s string) string {
			return strings.Replace(s, `"max_body": null`, `"max_body": null, "key_ttl_ms": 0`, 1)
		}, "/claims/key_ttl_ms"},
		{"a key TTL over a year", func(s string) string {
			return strings.Replace(s, `"max_body": null`, `"max_body": null, "key_ttl_ms": 31536000001`, 1)
		}, "/claims/key_ttl_ms"},
		{"a key TTL of a year", func(s string) string {
			return strings.Replace(s, `"max_body": null`, `"max_body": null, "key_ttl_ms": 31536000000`, 1)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("targets/tiny/target.json", []byte(tc.edit(minimal)), set)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse = %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Parse error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	tg := loadMinimal(t, func(s string) string {
		return strings.Replace(s, `"max_body": null`, `"max_body": null, "key_ttl_ms": 1000`, 1)
	})
	if got := tg.Claims.KeyTTLMS; got == nil || *got != 1000 {
		t.Fatalf("Claims.KeyTTLMS = %v, want 1000", got)
	}
	if got := loadMinimal(t, nil).Claims.KeyTTLMS; got != nil {
		t.Fatalf("Claims.KeyTTLMS = %v without the claim, want nil", *got)
	}
}

// Ensure key_format uuid sends every key the lab's server accepts as its
// version 5 UUID (vectors from Python's uuid.uuid5 with the lab's
// namespace), the same for every call, and a malformed key as written.
func TestKeyFormat(t *testing.T) {
	for _, tc := range []struct {
		f       KeyFormat
		key     string
		want    string
		comment string
	}{
		{KeyUUID, "same", "262b8893-bf06-5b5b-ba4d-8a208a32ae10", ""},
		{KeyUUID, "pay-1", "a7d4a278-32f4-5a67-a30b-0837db4b0729", ""},
		{KeyUUID, "key-0", "f2d53575-290e-552d-9f10-332897c96ff9", ""},
		{KeyUUID, "a", "06f51918-dcdd-5f46-9e48-91e0efd52c64", ""},
		{KeyUUID, "bad key", "bad key", "malformed: the case tests its refusal"},
		{KeyUUID, strings.Repeat("k", 65), strings.Repeat("k", 65), "too long for the lab's server"},
		{KeyUUID, `"same"`, `"same"`, "quoted: sent as written"},
		{KeyVerbatim, "same", "same", ""},
	} {
		if got := tc.f.Key(tc.key); got != tc.want {
			t.Errorf("%s.Key(%.20q) = %q, want %q %s", tc.f, tc.key, got, tc.want, tc.comment)
		}
	}
	tg := loadMinimal(t, func(s string) string {
		return strings.Replace(s, `"key_header": "Idempotency-Key"`, `"key_header": "Idempotency-Key", "key_format": "uuid"`, 1)
	})
	if got := tg.Request.KeyFormat; got != KeyUUID {
		t.Fatalf("Request.KeyFormat = %q, want uuid", got)
	}
	if got := loadMinimal(t, nil).Request.KeyFormat; got != KeyVerbatim {
		t.Fatalf("Request.KeyFormat = %q by default, want verbatim", got)
	}
}

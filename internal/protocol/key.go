package protocol

// This file is the Idempotency-Key syntax. A key is a token of 1 to 64
// characters from [A-Za-z0-9_-]. It may be sent bare (abc-1) or as a
// structured-field string ("abc-1"), the spelling the IETF httpapi draft
// uses; both spellings name the same key. Anything else is rejected, so
// that a server never has to guess what a client meant.

import (
	"errors"
	"net/http"
	"strings"
)

// MaxKeyLen is the longest key accepted, in bytes.
const MaxKeyLen = 64

// KeyPattern is the bare-token syntax ParseKey accepts, as the manifest
// records it.
const KeyPattern = "[A-Za-z0-9_-]{1,64}"

// Errors returned by ParseKey and KeyFromHeader. Their text is fixed so that a
// server can put it in a reply that is recorded byte for byte.
var (
	ErrKeyEmpty    = errors.New("empty key")
	ErrKeyTooLong  = errors.New("key longer than 64 characters")
	ErrKeyBadChar  = errors.New("key has a character outside [A-Za-z0-9_-]")
	ErrKeyQuote    = errors.New("unbalanced quote")
	ErrKeyMultiple = errors.New("more than one Idempotency-Key header line")
)

// ParseKey returns the key named by one header field value, bare or quoted.
func ParseKey(v string) (string, error) {
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", ErrKeyQuote
		}
		v = v[1 : len(v)-1]
	}
	if v == "" {
		return "", ErrKeyEmpty
	}
	if strings.Contains(v, `"`) {
		return "", ErrKeyQuote
	}
	if len(v) > MaxKeyLen {
		return "", ErrKeyTooLong
	}
	for i := 0; i < len(v); i++ {
		if !isTokenByte(v[i]) {
			return "", ErrKeyBadChar
		}
	}
	return v, nil
}

// KeyFromHeader returns the key carried by h, or "" when h has no
// Idempotency-Key at all. Several header lines are an error, even when they
// agree: a proxy that duplicated the header is not something to guess about.
func KeyFromHeader(h http.Header) (string, error) {
	vs := h.Values(KeyHeader)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return ParseKey(vs[0])
	default:
		return "", ErrKeyMultiple
	}
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// IsFieldName reports whether s may name an HTTP header field (an RFC 9110
// token): the proxy and the sink check the header names a target file
// gives them with it.
func IsFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || c <= ' ' || c == 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

package protocol

// The Idempotency-Key syntax: a token sent bare (abc-1) or as a
// structured-field string ("abc-1", the IETF httpapi draft's spelling).
// Anything else is rejected, so a server never guesses what a client meant.

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

// Errors of ParseKey and KeyFromHeader: fixed text, for replies recorded
// byte for byte.
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

// KeyFromHeader returns the key carried by h, or "" when there is none.
// Several header lines are an error, even when they agree.
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
// token).
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

// Package idemkey parses the Idempotency-Key request header.
//
// A key is a token of 1 to 64 characters from [A-Za-z0-9_-]. It may be sent
// bare (abc-1) or as a structured-field string ("abc-1"), the spelling the
// IETF httpapi draft uses; both spellings name the same key. Anything else is
// rejected, so that a server never has to guess what a client meant.
package idemkey

import (
	"errors"
	"net/http"
	"strings"
)

// Header is the canonical name of the request header carrying the key.
const Header = "Idempotency-Key"

// MaxLen is the longest key accepted, in bytes.
const MaxLen = 64

// Errors returned by Parse and FromHeader. Their text is fixed so that a
// server can put it in a reply that is recorded byte for byte.
var (
	ErrEmpty    = errors.New("empty key")
	ErrTooLong  = errors.New("key longer than 64 characters")
	ErrBadChar  = errors.New("key has a character outside [A-Za-z0-9_-]")
	ErrQuote    = errors.New("unbalanced quote")
	ErrMultiple = errors.New("more than one Idempotency-Key header line")
)

// Parse returns the key named by one header field value, bare or quoted.
func Parse(v string) (string, error) {
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", ErrQuote
		}
		v = v[1 : len(v)-1]
	}
	if v == "" {
		return "", ErrEmpty
	}
	if strings.Contains(v, `"`) {
		return "", ErrQuote
	}
	if len(v) > MaxLen {
		return "", ErrTooLong
	}
	for i := 0; i < len(v); i++ {
		if !isTokenByte(v[i]) {
			return "", ErrBadChar
		}
	}
	return v, nil
}

// FromHeader returns the key carried by h, or "" when h has no
// Idempotency-Key at all. Several header lines are an error, even when they
// agree: a proxy that duplicated the header is not something to guess about.
func FromHeader(h http.Header) (string, error) {
	vs := h.Values(Header)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return Parse(vs[0])
	default:
		return "", ErrMultiple
	}
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

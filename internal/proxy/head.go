package proxy

import (
	"bytes"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// A field is one header field of a request head as it was sent: its first
// line and any continuation lines (obs-fold), line ends included.
type field struct {
	name string // the field name as sent, before the colon
	raw  []byte
}

// A head is a request head split into its parts as sent; joined again
// they are the head byte for byte.
type head struct {
	line   []byte // the request line, line end included
	fields []field
	end    []byte // the empty line that ends the head
}

// splitHead splits a request head that http.ReadRequest accepted (so
// every line ends in "\n" or "\r\n", every field line but a continuation
// holds a name and a colon, and the head ends with its first empty line).
// It reports an error for bytes that are not such a head.
func splitHead(b []byte) (head, error) {
	var h head
	lineEnd := func(from int) int {
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			return -1
		}
		return from + i + 1
	}
	at := lineEnd(0)
	if at < 0 {
		return head{}, errors.New("no request line")
	}
	h.line = b[:at]
	for {
		next := lineEnd(at)
		if next < 0 {
			return head{}, errors.New("no empty line ends the head")
		}
		l := b[at:next]
		switch {
		case len(l) == 1 || len(l) == 2 && l[0] == '\r':
			if next != len(b) {
				return head{}, errors.New("bytes after the empty line")
			}
			h.end = l
			return h, nil
		case l[0] == ' ' || l[0] == '\t':
			if len(h.fields) == 0 {
				return head{}, errors.New("a continuation line before any field")
			}
			last := &h.fields[len(h.fields)-1]
			last.raw = b[next-len(l)-len(last.raw) : next]
		default:
			colon := bytes.IndexByte(l, ':')
			if colon <= 0 {
				return head{}, errors.New("a field line without a name")
			}
			h.fields = append(h.fields, field{name: string(l[:colon]), raw: l})
		}
		at = next
	}
}

// count returns how many fields are called name (case-insensitive).
func (h head) count(name string) int {
	n := 0
	for _, f := range h.fields {
		if strings.EqualFold(f.name, name) {
			n++
		}
	}
	return n
}

// edit returns the head with every field called one of drop (any case)
// removed and add's fields, sorted by name, appended before the empty
// line. The rest is kept byte for byte.
func (h head) edit(drop []string, add http.Header) []byte {
	out := bytes.Clone(h.line)
	for _, f := range h.fields {
		if !slices.ContainsFunc(drop, func(d string) bool { return strings.EqualFold(d, f.name) }) {
			out = append(out, f.raw...)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(add)) {
		for _, v := range add[name] {
			out = append(out, name+": "+v+"\r\n"...)
		}
	}
	return append(out, h.end...)
}

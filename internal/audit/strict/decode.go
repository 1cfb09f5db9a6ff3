// Package strict reads untrusted JSON strictly (valid UTF-8, no member
// named twice, bounded nesting and size, nothing after the value) and
// against the schemas of schema/, with stable, sorted failure lines. The
// audit and the runner both read with it, so that nothing the runner
// accepts is something the audit refuses. It imports no lab package.
package strict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// Caps bound a document's values (objects, arrays, strings, numbers and
// literals, wherever they are) and, of them, its objects (a decoded object
// takes ~330 bytes, ten times a number): the memory a decoded document
// takes.
type Caps struct{ Values, Objects int }

// MaxDepth bounds the nesting of a JSON document, so that no input can
// make the decoder recurse without limit.
const MaxDepth = 64

// Decode decodes exactly one JSON value strictly: the bytes must be
// valid UTF-8, no object may name a member twice (at any depth: the
// standard decoder keeps the last one silently, so a reader and a grep
// could disagree on what a file says), nesting stays under MaxDepth, the
// document holds at most caps.Values values and caps.Objects objects (the
// caps bound the memory the decoded value takes, see read.go), and nothing
// but white space may follow the value. Numbers are kept as json.Number;
// arrays take exactly the room of their elements.
//
// It is a small recursive-descent parser of its own rather than
// encoding/json's token stream: Decoder.Token decodes every number as a
// top-level value and builds an error string at its end, which made the
// audit of a chaos history (tens of thousands of lines) spend most of its
// time formatting errors it then discarded. FuzzDecode holds it to
// encoding/json's reading of every document both accept.
func Decode(data []byte, caps Caps) (any, error) {
	if !utf8.Valid(data) {
		off := 0 // the first byte that is not UTF-8
		for r, n := utf8.DecodeRune(data); r != utf8.RuneError || n > 1; r, n = utf8.DecodeRune(data[off:]) {
			off += n
		}
		return nil, &SyntaxError{off, fmt.Errorf("invalid UTF-8 at byte %d", off)}
	}
	p := &parser{data: data, caps: caps}
	p.space()
	if p.off == len(data) {
		return nil, &SyntaxError{p.off, io.ErrUnexpectedEOF}
	}
	v, err := p.value(0)
	if _, over := err.(*CapError); err != nil && !over {
		return nil, &SyntaxError{min(p.off, len(data)), err}
	}
	if err != nil {
		return nil, err
	}
	p.space()
	if p.off != len(data) {
		return nil, &SyntaxError{p.off, errors.New("unexpected data after the JSON value")}
	}
	return v, nil
}

// A SyntaxError is a document that is not strict JSON; Offset is the
// byte where reading stopped.
type SyntaxError struct {
	Offset int
	Err    error
}

func (e *SyntaxError) Error() string { return e.Err.Error() }
func (e *SyntaxError) Unwrap() error { return e.Err }

// Where is "line L, column C" (both from 1) of byte offset off of data,
// for a message to a person editing the file.
func Where(data []byte, off int) string {
	off = min(max(off, 0), len(data))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(data[:off], '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

// parser reads one JSON document from data, valid UTF-8.
type parser struct {
	data            []byte
	off             int
	caps            Caps
	values, objects int   // read so far
	stack           []any // the elements of the arrays being read, innermost last
}

// A CapError is a document with more values, or objects, than its
// cap.
type CapError struct {
	limit int
	what  string // "values" or "objects"
}

func (e *CapError) Error() string {
	return fmt.Sprintf("over the cap of %d JSON %s", e.limit, e.what)
}

// Refusal says why decodeJSON refused a document: over a cap, or "not
// valid JSON: " and what is wrong.
func Refusal(err error) string {
	if _, over := err.(*CapError); over {
		return err.Error()
	}
	return "not valid JSON: " + err.Error()
}

// space skips JSON white space.
func (p *parser) space() {
	for p.off < len(p.data) {
		switch p.data[p.off] {
		case ' ', '\t', '\n', '\r':
			p.off++
		default:
			return
		}
	}
}

// syntax is the error for the byte at p.off, or for the end of input.
func (p *parser) syntax(what string) error {
	if p.off >= len(p.data) {
		return io.ErrUnexpectedEOF
	}
	return fmt.Errorf("invalid character %q %s at byte %d", p.data[p.off], what, p.off)
}

// value reads the value that starts at p.off (no white space before it).
func (p *parser) value(depth int) (any, error) {
	if p.off >= len(p.data) {
		return nil, io.ErrUnexpectedEOF
	}
	if p.values++; p.values > p.caps.Values {
		return nil, &CapError{p.caps.Values, "values"}
	}
	switch c := p.data[p.off]; {
	case c == '{' || c == '[':
		if depth >= MaxDepth {
			return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
		}
		if c == '{' {
			if p.objects++; p.objects > p.caps.Objects {
				return nil, &CapError{p.caps.Objects, "objects"}
			}
			return p.object(depth)
		}
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		text, err := p.numberSpan()
		if err != nil {
			return nil, err
		}
		return json.Number(text), nil
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	}
	return nil, p.syntax("looking for the beginning of a value")
}

func (p *parser) object(depth int) (any, error) {
	p.off++ // '{'
	obj := map[string]any{}
	p.space()
	if p.off < len(p.data) && p.data[p.off] == '}' {
		p.off++
		return obj, nil
	}
	for {
		if p.off >= len(p.data) || p.data[p.off] != '"' {
			return nil, p.syntax("looking for the beginning of a member name")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[k]; dup {
			return nil, fmt.Errorf("duplicate member name %q at byte %d", k, p.off)
		}
		p.space()
		if p.off >= len(p.data) || p.data[p.off] != ':' {
			return nil, p.syntax("after a member name")
		}
		p.off++
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		obj[k] = v
		if closed, err := p.commaOrClose('}', "after a member's value"); err != nil || closed {
			return obj, err
		}
	}
}

// array reads an array's elements onto p.stack, then copies them into a
// slice of their exact length (appending to the slice itself would leave
// up to half of it unused).
func (p *parser) array(depth int) (any, error) {
	p.off++ // '['
	p.space()
	if p.off < len(p.data) && p.data[p.off] == ']' {
		p.off++
		return []any{}, nil
	}
	base := len(p.stack)
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		p.stack = append(p.stack, v)
		closed, err := p.commaOrClose(']', "after an array element")
		if err != nil {
			return nil, err
		}
		if closed {
			arr := slices.Clone(p.stack[base:])
			clear(p.stack[base:])
			p.stack = p.stack[:base]
			return arr, nil
		}
	}
}

// commaOrClose reads what follows an object's member or an array's
// element, after white space: the closing byte (closed), or a comma and
// the white space after it; anything else is a syntax error (where says
// what it came after).
func (p *parser) commaOrClose(closer byte, where string) (closed bool, err error) {
	p.space()
	if p.off >= len(p.data) {
		return false, io.ErrUnexpectedEOF
	}
	switch p.data[p.off] {
	case ',':
		p.off++
		p.space()
		return false, nil
	case closer:
		p.off++
		return true, nil
	}
	return false, p.syntax(where)
}

// str reads a string. One without escapes is taken as it is (the whole
// document is valid UTF-8); one with escapes is handed to encoding/json,
// so that \u escapes and lone surrogates read exactly as it reads them.
func (p *parser) str() (string, error) {
	start := p.off
	raw, escaped, err := p.strSpan()
	switch {
	case err != nil:
		return "", err
	case !escaped:
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("string at byte %d: %w", start, err)
	}
	return s, nil
}

// strSpan reads a string and returns its bytes, quotes included, and
// whether it holds an escape.
func (p *parser) strSpan() (raw []byte, escaped bool, err error) {
	start := p.off
	p.off++ // '"'
	for p.off < len(p.data) {
		switch c := p.data[p.off]; {
		case c == '"':
			p.off++
			return p.data[start:p.off], escaped, nil
		case c == '\\':
			escaped = true
			p.off += 2 // the escaped byte cannot end the string
		case c < 0x20:
			return nil, false, p.syntax("in a string")
		default:
			p.off++
		}
	}
	return nil, false, io.ErrUnexpectedEOF
}

// numberSpan reads a number by JSON's grammar and returns its text.
func (p *parser) numberSpan() ([]byte, error) {
	start := p.off
	digits := func() int {
		n := 0
		for p.off < len(p.data) && p.data[p.off] >= '0' && p.data[p.off] <= '9' {
			p.off++
			n++
		}
		return n
	}
	if p.data[p.off] == '-' {
		p.off++
	}
	switch {
	case p.off < len(p.data) && p.data[p.off] == '0':
		p.off++
	case digits() == 0:
		return nil, p.syntax("in a number")
	}
	if p.off < len(p.data) && p.data[p.off] == '.' {
		p.off++
		if digits() == 0 {
			return nil, p.syntax("after a decimal point")
		}
	}
	if p.off < len(p.data) && (p.data[p.off] == 'e' || p.data[p.off] == 'E') {
		p.off++
		if p.off < len(p.data) && (p.data[p.off] == '+' || p.data[p.off] == '-') {
			p.off++
		}
		if digits() == 0 {
			return nil, p.syntax("in an exponent")
		}
	}
	return p.data[start:p.off], nil
}

// literal reads true, false or null.
func (p *parser) literal(word string, v any) (any, error) {
	if !bytes.HasPrefix(p.data[p.off:], []byte(word)) {
		if len(p.data)-p.off < len(word) && bytes.HasPrefix([]byte(word), p.data[p.off:]) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, p.syntax("in a literal")
	}
	p.off += len(word)
	return v, nil
}

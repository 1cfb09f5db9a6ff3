package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// maxDepth bounds the nesting of a JSON document, so that no input can
// make the decoder recurse without limit.
const maxDepth = 64

// decodeJSON decodes exactly one JSON value strictly: the bytes must be
// valid UTF-8, no object may name a member twice (at any depth: the
// standard decoder keeps the last one silently, so a reader and a grep
// could disagree on what a file says), nesting stays under maxDepth, and
// nothing but white space may follow the value. Numbers are kept as
// json.Number.
func decodeJSON(data []byte) (any, error) {
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, n := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return nil, fmt.Errorf("invalid UTF-8 at byte %d", off)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

// decodeValue reads one value from dec's token stream.
func decodeValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := nextToken(dec)
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	switch d {
	case '{':
		obj := map[string]any{}
		for dec.More() {
			kt, err := nextToken(dec)
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			if _, dup := obj[k]; dup {
				return nil, fmt.Errorf("duplicate member name %q at byte %d", k, dec.InputOffset())
			}
			v, err := decodeValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			obj[k] = v
		}
		if _, err := nextToken(dec); err != nil { // '}'
			return nil, err
		}
		return obj, nil
	case '[':
		arr := []any{}
		for dec.More() {
			v, err := decodeValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := nextToken(dec); err != nil { // ']'
			return nil, err
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

// nextToken is dec.Token inside a value, where the end of input is unexpected.
func nextToken(dec *json.Decoder) (json.Token, error) {
	t, err := dec.Token()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return t, err
}

package casefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of objects and arrays a case file may
// have, the audit's own bound: a file nested deeper is refused here, at
// load, rather than by the audit after the run.
const MaxDepth = 64

// checkStrict refuses what encoding/json reads leniently but the audit's
// reader refuses, so that the runner never runs a case file whose evidence
// the audit would reject: bytes that are not valid UTF-8 (the standard
// decoder turns them into U+FFFD), an object naming a member twice (it keeps
// the last), nesting deeper than MaxDepth, and anything but white space
// after the value. The error names the place: a line and column, and the
// JSON pointer of the object or value where it applies.
func checkStrict(b []byte) error {
	if !utf8.Valid(b) {
		off := 0
		for off < len(b) {
			r, n := utf8.DecodeRune(b[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return fmt.Errorf("%s: invalid UTF-8", position(b, off))
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := walk(d, b, "", 0); err != nil {
		return err
	}
	if rest := bytes.TrimLeft(b[d.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return fmt.Errorf("%s: data after the JSON value", position(b, len(b)-len(rest)))
	}
	return nil
}

// walk reads one value from d, whose pointer is at, nested depth levels.
func walk(d *json.Decoder, b []byte, at string, depth int) error {
	start := next(b, int(d.InputOffset()))
	tok, err := d.Token()
	if err != nil {
		return syntaxError(b, start, err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	if depth >= MaxDepth {
		return fmt.Errorf("%s: %s: nested deeper than %d levels", position(b, start), pointer(at), MaxDepth)
	}
	switch delim {
	case '[':
		for i := 0; d.More(); i++ {
			if err := walk(d, b, at+"/"+strconv.Itoa(i), depth+1); err != nil {
				return err
			}
		}
	case '{':
		seen := map[string]bool{}
		for d.More() {
			off := next(b, int(d.InputOffset()))
			tok, err := d.Token()
			if err != nil {
				return syntaxError(b, off, err)
			}
			name, _ := tok.(string)
			if seen[name] {
				return fmt.Errorf("%s: %s: member %q appears twice (a reader would keep one of them silently)", position(b, off), pointer(at), name)
			}
			seen[name] = true
			if err := walk(d, b, at+"/"+escapePointer(name), depth+1); err != nil {
				return err
			}
		}
	}
	off := int(d.InputOffset())
	if _, err := d.Token(); err != nil { // the closing delimiter
		return syntaxError(b, off, err)
	}
	return nil
}

// next skips from off the white space and separators (',' and ':') the
// decoder has not yet read, to the start of the next token.
func next(b []byte, off int) int {
	for off < len(b) && strings.IndexByte(" \t\r\n,:", b[off]) >= 0 {
		off++
	}
	return off
}

// syntaxError places a decoder error at its offset.
func syntaxError(b []byte, off int, err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		off = int(se.Offset)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
		off = len(b)
	}
	return fmt.Errorf("%s: not JSON: %w", position(b, off), err)
}

// position is "line L, column C" of byte offset off (both from 1).
func position(b []byte, off int) string {
	off = min(max(off, 0), len(b))
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(b[:off], '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

// pointer is a JSON pointer for messages: "/" for the document itself.
func pointer(at string) string {
	if at == "" {
		return "/"
	}
	return at
}

// escapePointer escapes a member name for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

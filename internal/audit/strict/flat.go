package strict

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// A Flat is one JSON object read in place, with no allocation, when its
// members' values are numbers, literals or strings without escapes and no
// name is given twice (a chaos history's attempt, event and effect lines).
// Anything else (an escape, a nested value, a name twice, a syntax error,
// invalid UTF-8) it leaves to Decode: it reads an object only where Decode
// would read the same members.
type Flat struct {
	Members []FlatMember
}

// A FlatMember is one member of a Flat: its name and value, the value's
// kind 's' a string (Text its contents, unescaped), 'n' a number (Text its
// digits), 't' true, 'f' false, 'z' null.
type FlatMember struct {
	Name []byte
	Kind byte
	Text []byte
}

// maxFlatMembers bounds the members a flat line holds (an attempt line
// has 16).
const maxFlatMembers = 32

// Read reads line into f, reporting whether it could.
func (f *Flat) Read(line []byte) bool {
	if !utf8.Valid(line) {
		return false
	}
	p := parser{data: line}
	p.space()
	if p.off >= len(line) || line[p.off] != '{' {
		return false
	}
	p.off++
	p.space()
	closed := p.off < len(line) && line[p.off] == '}'
	if closed {
		p.off++
	}
	for !closed {
		if p.off >= len(line) || line[p.off] != '"' || len(f.Members) == maxFlatMembers {
			return false
		}
		raw, escaped, err := p.strSpan()
		if err != nil || escaped {
			return false
		}
		m := FlatMember{Name: raw[1 : len(raw)-1]}
		if slices.ContainsFunc(f.Members, func(o FlatMember) bool { return bytes.Equal(o.Name, m.Name) }) {
			return false // a name twice: Decode says where
		}
		p.space()
		if p.off >= len(line) || line[p.off] != ':' {
			return false
		}
		p.off++
		p.space()
		if p.off >= len(line) {
			return false
		}
		switch c := line[p.off]; {
		case c == '"':
			raw, escaped, err := p.strSpan()
			if err != nil || escaped {
				return false
			}
			m.Kind, m.Text = 's', raw[1:len(raw)-1]
		case c == '-' || c >= '0' && c <= '9':
			text, err := p.numberSpan()
			if err != nil {
				return false
			}
			m.Kind, m.Text = 'n', text
		case c == 't' || c == 'f' || c == 'n':
			word, kind := "true", byte('t')
			if c == 'f' {
				word, kind = "false", 'f'
			} else if c == 'n' {
				word, kind = "null", 'z'
			}
			if _, err := p.literal(word, nil); err != nil {
				return false
			}
			m.Kind = kind
		default:
			return false
		}
		f.Members = append(f.Members, m)
		if closed, err = p.commaOrClose('}', ""); err != nil {
			return false
		}
	}
	p.space()
	return p.off == len(line)
}

// Get returns the kind and text of member name (kind 0 if none).
func (f *Flat) Get(name string) (kind byte, text []byte) {
	for _, m := range f.Members {
		if string(m.Name) == name {
			return m.Kind, m.Text
		}
	}
	return 0, nil
}

// Package flaghelp renders a command's -h flag list from its
// flag.FlagSet, so the help cannot name a flag or default the command does
// not have, and lays out the help's other lists the same way. It holds no
// lab logic and imports only the standard library (TestImportsOnlyStd):
// that is why the audit, which imports no lab package, may use it.
package flaghelp

import (
	"flag"
	"fmt"
	"strings"
)

// The help's layout: an item's head starts at column 2, its text at
// Column, and no line is longer than Width bytes (but a word that is
// longer by itself).
const (
	Column = 20
	Width  = 78
)

// Flags returns the help of fs's flags named (all, in name order, when
// none), one Item each: flag and argument, usage, then in parentheses
// note's word and the default. The argument is the usage's backquoted
// word or N, D or NAME; a boolean flag's follows "=" (-flag=BOOL). An
// unknown name panics.
func Flags(fs *flag.FlagSet, names []string, note func(f *flag.Flag) string) string {
	var b strings.Builder
	write := func(f *flag.Flag) {
		head := "-" + f.Name
		arg, text := flag.UnquoteUsage(f)
		switch arg {
		case "int", "uint", "float":
			arg = "N"
		case "duration":
			arg = "D"
		case "string", "value":
			arg = "NAME"
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
			head += " " + arg
		} else if arg != "" {
			head += "=" + arg
		}
		var extra []string
		if note != nil {
			if n := note(f); n != "" {
				extra = append(extra, n)
			}
		}
		if f.DefValue != "" && f.DefValue != "false" {
			extra = append(extra, "default "+f.DefValue)
		}
		if len(extra) > 0 {
			text += " (" + strings.Join(extra, "; ") + ")"
		}
		b.WriteString(Item(Column, head, text))
	}
	if len(names) == 0 {
		fs.VisitAll(write)
		return b.String()
	}
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			panic(fmt.Sprintf("flaghelp: %s defines no flag -%s", fs.Name(), name))
		}
		write(f)
	}
	return b.String()
}

// Item returns one item of a help list: head at column 2, then text from
// column, its words wrapped so that no line is longer than Width, every
// further line starting at column. A head that reaches column-1 is a line
// of its own, and the text starts on the next. No line ends in a space.
func Item(column int, head, text string) string {
	var b strings.Builder
	words := strings.Fields(text)
	indent := strings.Repeat(" ", max(column, 0))
	line := "  " + head
	if len(line) >= column-1 {
		if len(words) == 0 {
			return line + "\n"
		}
		b.WriteString(line + "\n")
		line = ""
	}
	line += indent[len(line):]
	fresh := true
	for _, word := range words {
		if !fresh && len(line)+1+len(word) > Width {
			b.WriteString(line + "\n")
			line, fresh = indent, true
		}
		if !fresh {
			line += " "
		}
		line += word
		fresh = false
	}
	b.WriteString(strings.TrimRight(line, " ") + "\n")
	return b.String()
}

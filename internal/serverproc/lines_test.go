package serverproc

import (
	"strings"
	"testing"
)

// Ensure a target's output is read line by line with each line bounded: a
// line over the bound is cut and marked, the lines after it are kept, the
// last line counts without its newline, and "\r\n" ends a line as "\n".
func TestEachLine(t *testing.T) {
	long := strings.Repeat("x", 2<<20)
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"lines", "a\nb\n", []string{"a", "b"}},
		{"no final newline", "a\nb", []string{"a", "b"}},
		{"blank lines kept", "\n\na\n", []string{"", "", "a"}},
		{"crlf", "a\r\nb\r\n", []string{"a", "b"}},
		{"exactly the bound", strings.Repeat("y", 16) + "\nz\n", []string{strings.Repeat("y", 16), "z"}},
		{"one over the bound", strings.Repeat("y", 17) + "\nz\n", []string{strings.Repeat("y", 16) + " [line cut at 16 bytes: 1 more not kept]", "z"}},
		{"a 2 MiB line, then more", long + "\nafter\n", []string{strings.Repeat("x", 16) + " [line cut at 16 bytes: 2097136 more not kept]", "after"}},
		{"a 2 MiB line without a newline", long, []string{strings.Repeat("x", 16) + " [line cut at 16 bytes: 2097136 more not kept]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			eachLine(strings.NewReader(tc.in), 16, func(s string) { got = append(got, s) })
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Errorf("lines %q, want %q", got, tc.want)
			}
		})
	}
}

// Fuzz eachLine with what a target may print: every line is at most the
// bound and its mark, there is one line per newline (and one for a last
// line without one), and nothing kept was not printed.
func FuzzEachLine(f *testing.F) {
	for _, s := range []string{"", "a\nb", "\r\n\r\n", strings.Repeat("z", 40) + "\nq", "\x00\xff\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		const max = 16
		var got []string
		eachLine(strings.NewReader(in), max, func(s string) { got = append(got, s) })
		want := strings.Count(in, "\n")
		if in != "" && !strings.HasSuffix(in, "\n") {
			want++
		}
		if len(got) != want {
			t.Fatalf("%d lines of %q, want %d", len(got), in, want)
		}
		for _, line := range got {
			kept, _, _ := strings.Cut(line, " [line cut at ")
			if len(kept) > max || !strings.Contains(in, kept) {
				t.Fatalf("line %q of %q: longer than %d, or not printed", line, in, max)
			}
		}
	})
}

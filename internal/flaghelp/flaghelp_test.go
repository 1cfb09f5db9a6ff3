package flaghelp

import (
	"flag"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Ensure Item puts the head at column 2 and the text at the column, wraps
// at Width, and puts the text under a head that reaches the column.
func TestItem(t *testing.T) {
	long := "aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo"
	for _, c := range []struct {
		name       string
		column     int
		head, text string
		want       string
	}{
		{"short", 20, "-json", "print one JSON object",
			"  -json             print one JSON object\n"},
		{"head just fits", 20, "-max-body N", "bytes",
			"  -max-body N       bytes\n"},
		{"head two short of the column", 20, "-experiment NAME", "run it",
			"  -experiment NAME  run it\n"},
		{"head reaches column-1", 20, "-read-state FORMA", "print",
			"  -read-state FORMA\n                    print\n"},
		{"head longer than the column", 20, "-unsafe-registry NAME", "build the bug",
			"  -unsafe-registry NAME\n                    build the bug\n"},
		{"wrapped", 20, "-x", long,
			"  -x                aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk\n" +
				"                    llll mmmm nnnn oooo\n"},
		{"exit status column", 6, "23", long + " " + long,
			"  23  aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn\n" +
				"      oooo aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm\n" +
				"      nnnn oooo\n"},
		{"spaces collapse", 20, "-x", "  one \n two\t", "  -x                one two\n"},
		{"no text", 20, "-x", "", "  -x\n"},
		{"no text under a long head", 20, "-unsafe-registry NAME", "", "  -unsafe-registry NAME\n"},
		{"word longer than a line", 20, "-x", "a " + strings.Repeat("w", 70) + " b",
			"  -x                a\n                    " + strings.Repeat("w", 70) + "\n                    b\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Item(c.column, c.head, c.text)
			if got != c.want {
				t.Errorf("Item(%d, %q, ...) =\n%s\nwant\n%s", c.column, c.head, got, c.want)
			}
			for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
				if len(line) > Width && !strings.Contains(c.text, strings.TrimSpace(line)) {
					t.Errorf("line of %d bytes, more than %d: %q", len(line), Width, line)
				}
				if strings.HasSuffix(line, " ") {
					t.Errorf("line ends in a space: %q", line)
				}
			}
		})
	}
}

// lazy is a flag.Value that is neither a built-in nor a bool.
type lazy struct{ s string }

func (v *lazy) String() string     { return v.s }
func (v *lazy) Set(s string) error { v.s = s; return nil }

// testFlags defines one flag of each kind Flags tells apart.
func testFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.String("root", ".", "the checkout `DIR`")
	fs.String("case", "", "only this case")
	fs.Int("runs", 3, "observations")
	fs.Uint64("seed", 1, "the seed")
	fs.Float64("ratio", 0.5, "a ratio")
	fs.Duration("wait", 5*time.Second, "how long to wait")
	fs.Bool("json", false, "print JSON")
	fs.Bool("forward-key", true, "with -downstream, `BOOL`: forward the key")
	fs.Var(&lazy{s: "all"}, "store", "the store")
	fs.Var(&lazy{}, "experiment", "the experiment")
	return fs
}

// Ensure Flags renders each kind of flag's head, argument and default,
// in the order asked or in name order, with a note before the default.
func TestFlags(t *testing.T) {
	fs := testFlags()
	for _, c := range []struct {
		name  string
		names []string
		note  func(*flag.Flag) string
		want  string
	}{
		{"backquoted argument, default", []string{"root"}, nil,
			"  -root DIR         the checkout DIR (default .)\n"},
		{"string without a name, empty default", []string{"case"}, nil,
			"  -case NAME        only this case\n"},
		{"numbers", []string{"runs", "seed", "ratio"}, nil,
			"  -runs N           observations (default 3)\n" +
				"  -seed N           the seed (default 1)\n" +
				"  -ratio N          a ratio (default 0.5)\n"},
		{"duration", []string{"wait"}, nil,
			"  -wait D           how long to wait (default 5s)\n"},
		{"bool, false default not shown", []string{"json"}, nil,
			"  -json             print JSON\n"},
		{"bool with a named argument", []string{"forward-key"}, nil,
			"  -forward-key=BOOL\n                    with -downstream, BOOL: forward the key (default true)\n"},
		{"value", []string{"store", "experiment"}, nil,
			"  -store NAME       the store (default all)\n" +
				"  -experiment NAME  the experiment\n"},
		{"note before the default", []string{"runs", "case"}, func(f *flag.Flag) string {
			if f.Name == "runs" {
				return "1..10"
			}
			return ""
		},
			"  -runs N           observations (1..10; default 3)\n" +
				"  -case NAME        only this case\n"},
		{"note without a default", []string{"case"}, func(*flag.Flag) string { return "at most 64 bytes" },
			"  -case NAME        only this case (at most 64 bytes)\n"},
		{"every flag, in name order", nil, nil,
			"  -case NAME        only this case\n" +
				"  -experiment NAME  the experiment\n" +
				"  -forward-key=BOOL\n                    with -downstream, BOOL: forward the key (default true)\n" +
				"  -json             print JSON\n" +
				"  -ratio N          a ratio (default 0.5)\n" +
				"  -root DIR         the checkout DIR (default .)\n" +
				"  -runs N           observations (default 3)\n" +
				"  -seed N           the seed (default 1)\n" +
				"  -store NAME       the store (default all)\n" +
				"  -wait D           how long to wait (default 5s)\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Flags(fs, c.names, c.note); got != c.want {
				t.Errorf("Flags(%q) =\n%s\nwant\n%s", c.names, got, c.want)
			}
		})
	}
}

// Ensure asking for a flag the set does not define panics, naming it: a
// help that silently left a flag out would drift from the command.
func TestFlagsUnknownName(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "-nosuch") {
			t.Fatalf("recover() = %v, want a panic naming -nosuch", r)
		}
	}()
	Flags(testFlags(), []string{"json", "nosuch"}, nil)
}

// Ensure the package imports only the standard library: the audit, which
// may import no lab package, imports it (cmd/audit's deps test allows it
// by name on that promise).
func TestImportsOnlyStd(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps -test: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "idemlab/internal/flaghelp", "idemlab/internal/flaghelp.test":
		default:
			if !strings.HasPrefix(p, "[") { // "[idemlab/internal/flaghelp.test]"
				t.Errorf("internal/flaghelp links %s: it must stay neutral, the standard library alone", p)
			}
		}
	}
}

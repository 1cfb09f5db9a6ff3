// Package docs holds the lab's documentation pages; its test keeps the
// package map true.
package docs

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Ensure docs/packages.md lists every package of the module once, and
// nothing that is not one.
func TestPackageMapListsEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "idemlab/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var want []string
	for _, p := range strings.Fields(string(out)) {
		if p = strings.TrimPrefix(p, "idemlab/"); p != "docs" {
			want = append(want, p)
		}
	}
	b, err := os.ReadFile("packages.md")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/-]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		got = append(got, m[1])
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			t.Errorf("packages.md does not list %s", p)
		}
	}
	for _, p := range got {
		if !slices.Contains(want, p) {
			t.Errorf("packages.md lists %s, which is not a package", p)
		}
		if n := strings.Count(string(b), "| `"+p+"` |"); n != 1 {
			t.Errorf("packages.md lists %s %d times", p, n)
		}
	}
}

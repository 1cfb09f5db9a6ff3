package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Ensure the runner links no store engine: it reads what servers left
// through the server's -read-state mode, so "go run ./cmd/runner" compiles
// only light code and the one heavy compile (SQLite) is the server's
// announced build.
func TestRunnerLinksNoStoreEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(p, "modernc.org/sqlite"), strings.HasPrefix(p, "modernc.org/libc"),
			p == "idemlab/internal/store/open", p == "idemlab/internal/store/durable",
			p == "idemlab/internal/store/volatile", p == "idemlab/internal/store/postgres":
			t.Errorf("cmd/runner links %s", p)
		}
	}
}

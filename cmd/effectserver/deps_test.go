package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Ensure the server binary links no test code and not the throwaway
// PostgreSQL the runner and the tests start: what it links is what the
// evidence's server_sha256 pins.
func TestServerLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" || strings.HasPrefix(p, "idemlab/internal/pgcluster") || strings.HasSuffix(p, "test") && strings.HasPrefix(p, "idemlab/") {
			t.Errorf("cmd/effectserver links %s", p)
		}
	}
}

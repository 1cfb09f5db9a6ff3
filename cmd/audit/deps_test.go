package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Ensure the audit shares no code with the lab: the only idemlab packages
// it links are its own, so a mistake in the lab cannot hide from it.
func TestAuditImportsNoLabPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "idemlab/") && p != "idemlab/cmd/audit" && p != "idemlab/internal/audit" {
			t.Errorf("cmd/audit links %s: the audit must re-derive what it checks with its own code", p)
		}
	}
}

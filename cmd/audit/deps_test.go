package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Ensure the audit shares no code with the lab: the only idemlab packages
// it links are its own (internal/audit and the packages below it, such as
// its DSSE), so a mistake in the lab cannot hide from it; and
// its tests link none either (their fixture is files the runner wrote, not
// the runner's code). The one other it may link is internal/flaghelp,
// which lays out -h text, holds no lab logic and imports only the
// standard library (its own test says so).
func TestAuditImportsNoLabPackage(t *testing.T) {
	for _, args := range [][]string{{"-deps"}, {"-deps", "-test"}} {
		out, err := exec.Command("go", append(append([]string{"list"}, args...), "-f", "{{.ImportPath}}", ".")...).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
		}
		for _, p := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.HasPrefix(p, "idemlab/") {
				continue
			}
			switch p, _, _ = strings.Cut(p, " "); { // "idemlab/cmd/audit [idemlab/cmd/audit.test]"
			case p == "idemlab/cmd/audit", p == "idemlab/cmd/audit.test", p == "idemlab/internal/audit", p == "idemlab/internal/flaghelp",
				strings.HasPrefix(p, "idemlab/internal/audit/"):
			default:
				t.Errorf("go list %s: cmd/audit links %s: the audit must re-derive what it checks with its own code", strings.Join(args, " "), p)
			}
		}
	}
}

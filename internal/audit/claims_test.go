package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Ensure every claim the audit can list is made by the code of a check
// (a.claim("ID", ...)), never only defined: cmd/audit's
// TestClaimsHaveChecks then ties each claim an honest folder makes to a
// forgery that breaks it.
func TestClaimsMade(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(data)
	}
	for id := range claimDefs {
		if !strings.Contains(src.String(), `claim("`+id+`"`) {
			t.Errorf("claim %q: no check makes it (no a.claim(%q) in the package)", id, id)
		}
	}
}
